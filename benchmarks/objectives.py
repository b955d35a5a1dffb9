"""Peak memory and time of the local-signal paths in ``dashrepro.objectives``.

Compares one forward + backward of the per-token clipped forward-KL signal (Eq.
``supp_clipped_signal``) computed by

- ``naive``        -- ``local_signal_reference`` on full ``[B, T, V]`` logits;
- ``chunked``      -- ``local_signal`` (chunks of real tokens, recomputed in backward);
- ``hidden``       -- ``local_signal_from_hidden`` (logits built per chunk from hidden states);
- ``naive_hidden`` -- (opt-in) full logits ``h @ W^T`` followed by the naive path.

Each (path, dtype) runs in its own subprocess so that peaks do not mix. On CPU the peak is the
resident-set high-water mark above the resident set just before the call (``VmHWM`` after
resetting it through ``/proc/self/clear_refs``; ``ru_maxrss`` delta where that is not possible)
and the time is that of the same single call. On CUDA the peak is
``torch.cuda.max_memory_allocated`` above the allocation before the call, the time a median over
``--reps`` warm calls, and achieved bandwidth is printed against the device's peak bandwidth.
The memory of the inputs themselves is excluded; the gradient w.r.t. the student input is
included (every path must allocate it).

On CPU the workers run with ``MALLOC_MMAP_THRESHOLD_=131072`` so that freed chunk-sized blocks go
back to the OS and the resident-set peak tracks live tensors; ``--system-malloc`` keeps glibc's
dynamic threshold (the peaks then also include heap blocks glibc retains).

Run (CPU default, B=1 T=1024 V=151936 H=2048, fp32 and bf16, about 2-3 minutes on 2 cores)::

    .venv/bin/python benchmarks/objectives.py
    .venv/bin/python benchmarks/objectives.py --quick          # T=256 V=32768 H=512, seconds
    .venv/bin/python benchmarks/objectives.py --paths naive,chunked,hidden,naive_hidden
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

PATHS = ("naive", "chunked", "hidden", "naive_hidden")
DTYPES = ("fp32", "bf16")


# ----------------------------------------------------------------------------------------------
# Worker (runs in a subprocess)
# ----------------------------------------------------------------------------------------------


def _rss_kib() -> tuple[int | None, int | None]:
    """(VmRSS, VmHWM) of this process in KiB, or (None, None) off Linux."""
    try:
        with open("/proc/self/status") as fh:
            fields = dict(line.split(":", 1) for line in fh if ":" in line)
        return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])
    except (OSError, KeyError, ValueError):
        return None, None


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _time_and_peak(step, device, reps: int) -> dict:
    """One call of ``step``: its seconds (the median of ``reps`` on CUDA) and its peak memory
    above what was allocated before, with the method that measured it."""
    import torch

    result = {}
    if device.type == "cuda":
        step()  # full-size warm-up (allocator, kernel selection)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        times = []
        for _ in range(max(1, reps)):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        result["peak_mib"] = (torch.cuda.max_memory_allocated() - before) / 2**20
        result["seconds"] = statistics.median(times)
        result["method"] = "cuda.max_memory_allocated"
    else:
        rss_before, _ = _rss_kib()
        if rss_before is not None and _reset_hwm():
            t0 = time.perf_counter()
            step()
            result["seconds"] = time.perf_counter() - t0
            _, hwm = _rss_kib()
            result["peak_mib"] = (hwm - rss_before) / 1024
            result["method"] = "VmHWM-VmRSS"
        else:
            max_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            t0 = time.perf_counter()
            step()
            result["seconds"] = time.perf_counter() - t0
            max_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            per_mib = 2**20 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB else
            result["peak_mib"] = (max_after - max_before) / per_mib
            result["method"] = "ru_maxrss delta"
    return result


def _worker(args: argparse.Namespace) -> dict:
    import torch

    from dashrepro.objectives import (
        local_signal,
        local_signal_from_hidden,
        local_signal_reference,
    )

    device = torch.device(args.device)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    gen = torch.Generator(device="cpu").manual_seed(0)
    B, T, V, H = args.B, args.T, args.V, args.hidden

    def randn(*shape, scale=1.0):
        # Generated directly in the target dtype, chunk-free; no larger temporaries.
        x = torch.randn(*shape, generator=gen, dtype=dtype)
        if scale != 1.0:
            x.mul_(scale)
        return x.to(device)

    def make_step(length: int):
        """Inputs for ``length`` tokens and a closure running one forward + backward."""
        mask = torch.ones(B, length, dtype=torch.bool, device=device)
        if args.path in ("naive", "chunked"):
            s = randn(B, length, V, scale=2.0).requires_grad_(True)
            t = randn(B, length, V, scale=2.0)

            def step():
                if args.path == "naive":
                    r = local_signal_reference(s, t, mask)
                else:
                    r = local_signal(s, t, mask, chunk_size=args.chunk_size)
                r.sum().backward()
                s.grad = None

            return step

        hs = randn(B, length, H).requires_grad_(True)
        ht = randn(B, length, H)
        w = randn(V, H, scale=2.0 / H**0.5)

        def step():
            if args.path == "hidden":
                r = local_signal_from_hidden(hs, ht, w, mask, chunk_size=args.chunk_size)
            else:
                s_logits = hs @ w.T
                with torch.no_grad():
                    t_logits = ht @ w.T
                r = local_signal_reference(s_logits, t_logits, mask)
            r.sum().backward()
            hs.grad = None

        return step

    esize = torch.empty((), dtype=dtype).element_size()
    if args.path in ("naive", "chunked"):
        bytes_moved = 3 * B * T * V * esize  # read student and teacher logits, write the grad
        flops = 0.0
    else:
        bytes_moved = (3 * B * T * H + V * H) * esize
        n_matmuls = 5 if args.path == "hidden" else 3  # s, t (+ both recomputed) + grad_h
        flops = 2.0 * n_matmuls * B * T * H * V

    # Fault in library code pages and lazy initialisation on a 2-token problem first, so that
    # the resident-set peak below measures tensors, not code.
    make_step(2)()
    step = make_step(T)

    result = {"path": args.path, "dtype": args.dtype, "device": str(device)}
    result.update(_time_and_peak(step, device, args.reps))
    result["bytes_moved"] = bytes_moved
    result["flops"] = flops
    return result


# ----------------------------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------------------------


def _device_peak_bandwidth(device: str) -> tuple[float, str]:
    """Peak DRAM bandwidth in bytes/s: from device properties where exposed, else measured."""
    import torch

    props = torch.cuda.get_device_properties(torch.device(device))
    clock_khz = getattr(props, "memory_clock_rate", None)
    bus_bits = getattr(props, "memory_bus_width", None)
    if clock_khz and bus_bits:
        return 2.0 * clock_khz * 1e3 * bus_bits / 8, f"{props.name} spec (DDR x bus width)"
    x = torch.empty(1 << 28, dtype=torch.float32, device=device)  # 1 GiB
    y = torch.empty_like(x)
    y.copy_(x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        y.copy_(x)
    torch.cuda.synchronize()
    per = (time.perf_counter() - t0) / 10
    return 2 * x.numel() * 4 / per, f"{props.name} measured device-to-device copy"


def _run_one(args: argparse.Namespace, path: str, dtype: str) -> dict:
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        f"--path={path}",
        f"--dtype={dtype}",
        f"--B={args.B}",
        f"--T={args.T}",
        f"--V={args.V}",
        f"--hidden={args.hidden}",
        f"--device={args.device}",
        f"--reps={args.reps}",
    ]
    if args.chunk_size is not None:
        cmd.append(f"--chunk-size={args.chunk_size}")
    env = dict(os.environ)
    if not args.system_malloc:
        # A fixed mmap threshold stops glibc from keeping freed chunk-sized blocks on its heap,
        # so the resident-set peak tracks live tensors (what a caching GPU allocator reports).
        env.setdefault("MALLOC_MMAP_THRESHOLD_", "131072")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        return {"path": path, "dtype": dtype, "error": proc.stderr.strip().splitlines()[-1:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--B", type=int, default=1)
    p.add_argument("--T", type=int, default=1024)
    p.add_argument("--V", type=int, default=151936)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--paths", default="naive,chunked,hidden")
    p.add_argument("--chunk-size", type=int, default=None, help="rows per chunk (default: auto)")
    p.add_argument("--device", default=None, help="cpu or cuda[:i] (default: cuda if available)")
    p.add_argument("--reps", type=int, default=5, help="timed calls on CUDA (CPU: one call)")
    p.add_argument("--quick", action="store_true", help="T=256 V=32768 H=512")
    p.add_argument(
        "--system-malloc",
        action="store_true",
        help="CPU: keep glibc's dynamic mmap threshold (peaks then include heap retention)",
    )
    p.add_argument("--json", default=None, help="also write the results to this file")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--path", default=None, help=argparse.SUPPRESS)
    p.add_argument("--dtype", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.worker:
        print(json.dumps(_worker(args)))
        return 0

    import torch

    if args.device is None:
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.quick:
        args.T, args.V, args.hidden = 256, 32768, 512
    paths = [x for x in args.paths.split(",") if x]
    dtypes = [x for x in args.dtypes.split(",") if x]
    for x in paths:
        if x not in PATHS:
            p.error(f"unknown path {x!r}; choose from {PATHS}")
    for x in dtypes:
        if x not in DTYPES:
            p.error(f"unknown dtype {x!r}; choose from {DTYPES}")

    print(
        f"device={args.device} B={args.B} T={args.T} V={args.V} H={args.hidden} "
        f"chunk_size={args.chunk_size or 'auto'} threads={torch.get_num_threads()}"
    )
    if not args.device.startswith("cuda"):
        malloc = "glibc default" if args.system_malloc else "MALLOC_MMAP_THRESHOLD_=131072"
        print(f"cpu peak = VmHWM - VmRSS before the call; malloc: {malloc}")
    peak_bw, bw_source = (None, None)
    if args.device.startswith("cuda"):
        peak_bw, bw_source = _device_peak_bandwidth(args.device)
        print(f"roofline: {peak_bw / 1e9:.0f} GB/s ({bw_source})")
        print(
            "GB/s = compulsory bytes (read student and teacher inputs, write the input gradient;"
            " lm_head read once) / time; TFLOP/s counts the lm_head matmuls of hidden paths"
        )

    results = []
    header = f"{'dtype':<5} {'path':<13} {'peak MiB':>10} {'seconds':>9}"
    if peak_bw:
        header += f" {'GB/s':>8} {'%peak':>6} {'TFLOP/s':>8}"
    print(header)
    for dtype in dtypes:
        for path in paths:
            res = _run_one(args, path, dtype)
            results.append(res)
            if "error" in res:
                print(f"{dtype:<5} {path:<13} ERROR {res['error']}")
                continue
            line = f"{dtype:<5} {path:<13} {res['peak_mib']:>10.1f} {res['seconds']:>9.3f}"
            if peak_bw:
                bw = res["bytes_moved"] / res["seconds"]
                tflops = res["flops"] / res["seconds"] / 1e12
                line += f" {bw / 1e9:>8.1f} {100 * bw / peak_bw:>5.1f}% {tflops:>8.1f}"
            print(line, flush=True)

    print("ratios (naive / other; > 1 means the other path is smaller or faster):")
    for dtype in dtypes:
        by = {r["path"]: r for r in results if r["dtype"] == dtype and "error" not in r}
        if "naive" not in by:
            continue
        for other in ("chunked", "hidden"):
            if other in by:
                n, o = by["naive"], by[other]
                print(
                    f"  {dtype} naive/{other}: memory {n['peak_mib'] / max(o['peak_mib'], 1e-9):.2f}x"
                    f"  time {n['seconds'] / o['seconds']:.2f}x"
                )
        if "naive_hidden" in by and "hidden" in by:
            n, o = by["naive_hidden"], by["hidden"]
            print(
                f"  {dtype} naive_hidden/hidden: memory "
                f"{n['peak_mib'] / max(o['peak_mib'], 1e-9):.2f}x"
                f"  time {n['seconds'] / o['seconds']:.2f}x"
            )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"args": vars(args), "results": results}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
