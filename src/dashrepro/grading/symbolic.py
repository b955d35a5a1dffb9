r"""The symbolic benchmark grader behind every reported score (the paper's appendix "Answer
extraction and equivalence checking").

``grade_response``: the last ``\boxed{...}`` -> math-verify with a 5 s timeout -> the paper's
exact-match fallback, each sample recorded with the path its verdict took (math_verify,
exact_fallback, partial_parse, no_boxed, timeout, error) and, where an answer-form
normalisation (``answer_forms``) turned a False into True, which one. ``grading.batch`` runs it
in killable worker processes. The protocol step by step, the decisions the paper leaves open,
the answer forms and the timeouts: docs/grading.md. Model output is never ``eval``-ed.

    pytest tests/grading -q
    python benchmarks/grading.py --quick
"""

from __future__ import annotations

import math
import re
import threading
import time
from typing import Any

from dashrepro.grading.answer_forms import (
    NORMALISABLE_PATHS,
    NORMALISATION_MAX_CHARS,
    NORMALISATIONS,
    normalise_box,
)

__all__ = [
    "ERROR_TEXT_LIMIT",
    "PATHS",
    "extract_last_boxed",
    "exact_fallback_match",
    "grade_response",
]

PATHS = ("math_verify", "exact_fallback", "partial_parse", "no_boxed", "timeout", "error")

#: Longest ``error`` text kept per sample: math-verify's messages quote the whole input, which
#: for a pathological box is megabytes in every stored sample.
ERROR_TEXT_LIMIT = 300

# ---------------------------------------------------------------------------------------
# Extraction
# ---------------------------------------------------------------------------------------

# An opening box: "\boxed{", "\boxed {" (any whitespace before the brace) or "\fbox{".
# Brace-less forms such as "\boxed 5" are not boxes for this grader.
_BOX_OPEN = re.compile(r"\\(?:boxed|fbox)\s*\{")
# Tokens that matter for brace matching: an escaped character (so "\{" and "\}" are
# literal braces and "\\{" is a line break followed by a real brace) or a bare brace.
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)


def extract_last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` / ``\\boxed {...}`` / ``\\fbox{...}`` in text.

    "Last" means the opening command that starts last, so for ``\\boxed{\\boxed{5}}`` it
    is the inner box (content ``"5"``). Braces are matched with nesting; escaped braces
    ``\\{``/``\\}`` do not count. If the last opening box is never closed (a truncated
    response) the result is ``None``, even when an earlier box is complete. Linear time:
    one regex pass to find the last opener and one pass over the tokens after it.
    """
    last = None
    for last in _BOX_OPEN.finditer(text):  # noqa: B007 -- we want the final match
        pass
    if last is None:
        return None
    start = last.end()  # first character after the opening brace
    depth = 1
    for tok in _BRACE_TOKEN.finditer(text, start):
        c = tok.group()
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return text[start : tok.start()]
    return None


# ---------------------------------------------------------------------------------------
# Symbolic grading (math-verify) with the exact-match fallback
# ---------------------------------------------------------------------------------------

_DELIMITERS = ("$", "\\(", "\\[")


def _wrap_math(s: str) -> str:
    """Wrap in ``$...$`` unless the string already has a math delimiter."""
    if any(d in s for d in _DELIMITERS):
        return s
    return f"${s}$"


def _verifies(math_verify, gold_parsed: list, pred: str, secs: int) -> bool:
    """The plain math-verify rule of steps 3-6 for one normalised prediction (no fallback)."""
    pred_in = _wrap_math(pred)
    pred_parsed = _parse_cached(math_verify, pred_in, secs)
    if not pred_parsed or not _parse_cached(math_verify, pred_in, secs, "first_match"):
        return False
    return bool(
        math_verify.verify(gold_parsed, pred_parsed, timeout_seconds=secs, raise_on_error=True)
    )


def _try_normalisations(
    math_verify, pred: str, gold: str, gold_parsed: list, timeout_s: float, t0: float
) -> str | None:
    """Step 9: the chain of normalisation names that makes ``pred`` verify, or None.

    A math-verify timeout (``TimeoutException``) propagates: the caller keeps the plain verdict.
    """
    current = pred
    applied: list[str] = []
    for name, fn in NORMALISATIONS:
        new = normalise_box(fn(current, gold))
        if not new or new == current:
            continue
        current = new
        applied.append(name)
        left = timeout_s - (time.perf_counter() - t0)
        if left < 1:
            return None
        try:
            ok = _verifies(math_verify, gold_parsed, current, int(left))
        except Exception:  # a parse/verify error on this form: not a match, try the next
            ok = False
        if ok:
            return "+".join(applied)
    return None


def _exact_key(s: str) -> str:
    return s.replace("$", "").replace(" ", "").lower()


def exact_fallback_match(pred: str | None, gold: str) -> bool:
    """The paper's fallback: lowercase exact match after removing ``$`` and spaces."""
    if pred is None:
        return False
    return _exact_key(pred) == _exact_key(gold)


def _short(text: str | None, limit: int = ERROR_TEXT_LIMIT) -> str | None:
    """``text`` cut to ``limit`` characters, saying how much was cut."""
    if text is None or len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more characters]"


def _result(
    correct: bool,
    extracted: str | None,
    path: str,
    seconds: float = 0.0,
    error: str | None = None,
    normalisation: str | None = None,
) -> dict[str, Any]:
    return {
        "correct": bool(correct),
        "extracted": extracted,
        "path": path,
        "seconds": float(seconds),
        "error": _short(error),
        "normalisation": normalisation,
    }


def _require_main_thread() -> None:
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError(
            "grade_response/grade_batch(workers=0) must run in the main thread: "
            "math-verify's timeout uses signal.alarm. Use grade_batch(workers>=1) "
            "from other threads."
        )


# Memo of math_verify.parse results, keyed by the (wrapped) input string. parse is a
# deterministic function of its input (math-verify itself lru-caches parse_latex_cached),
# sympy objects are immutable and verify does not mutate them, so a cache hit cannot
# change a verdict. Returned lists (empty ones included) are stored; a timeout or other
# exception is never cached, so such items are re-tried each time. In Avg@12 evaluation every gold repeats
# 12 times and correct predictions repeat the gold, so most parses become hits.
_PARSE_CACHE: dict[tuple[str, int, str], list] = {}
_PARSE_CACHE_MAX = 20_000


def _parse_cached(math_verify, s: str, secs: int, extraction_mode: str = "any_match") -> list:
    key = (s, secs, extraction_mode)
    hit = _PARSE_CACHE.get(key)
    if hit is not None:
        return hit
    parsed = math_verify.parse(
        s,
        fallback_mode="no_fallback",
        extraction_mode=extraction_mode,
        parsing_timeout=secs,
        raise_on_error=True,
    )
    if len(_PARSE_CACHE) >= _PARSE_CACHE_MAX:
        _PARSE_CACHE.clear()
    _PARSE_CACHE[key] = parsed
    return parsed


def _grade_extracted(extracted: str | None, gold: str, timeout_s: float) -> dict[str, Any]:
    """Grade an already-extracted prediction (the part of the protocol after step 1)."""
    t0 = time.perf_counter()
    if extracted is None:
        return _result(False, None, "no_boxed", time.perf_counter() - t0)
    _require_main_thread()

    import math_verify
    from math_verify.errors import TimeoutException

    secs = max(1, math.ceil(timeout_s))
    try:
        pred = normalise_box(extracted)
        gold = normalise_box(gold)
    except Exception as e:  # not from math-verify: our own failure
        ok = exact_fallback_match(extracted, gold) if isinstance(gold, str) else False
        return _result(ok, extracted, "error", time.perf_counter() - t0, repr(e))
    parsed: dict[str, list] = {}
    res = _grade_plain(math_verify, TimeoutException, extracted, pred, gold, secs, parsed)
    if (
        not res["correct"]
        and res["path"] in NORMALISABLE_PATHS
        and parsed.get("gold")
        and len(pred) <= NORMALISATION_MAX_CHARS
    ):
        try:
            chain = _try_normalisations(math_verify, pred, gold, parsed["gold"], timeout_s, t0)
        except (TimeoutException, Exception):  # a timeout, or a bug here: keep the plain verdict
            chain = None
        if chain is not None:
            res = _result(True, extracted, "math_verify", 0.0, None, chain)
    res["seconds"] = time.perf_counter() - t0
    return res


def _grade_plain(
    math_verify,
    TimeoutException,  # noqa: N803 -- math-verify's exception class, imported lazily
    extracted: str,
    pred: str,
    gold: str,
    secs: int,
    parsed: dict[str, list],
) -> dict[str, Any]:
    """Steps 2-7 on the normalised box and gold; the gold's parse is left in ``parsed``."""
    try:
        pred_in = _wrap_math(pred)
        gold_in = _wrap_math(gold)
    except Exception as e:  # not from math-verify: our own failure
        return _result(exact_fallback_match(extracted, gold), extracted, "error", 0.0, repr(e))
    try:
        gold_parsed = _parse_cached(math_verify, gold_in, secs)
        parsed["gold"] = gold_parsed
        pred_parsed = _parse_cached(math_verify, pred_in, secs)
        if not gold_parsed or not pred_parsed:
            side = "gold" if not gold_parsed else "prediction"
            ok = exact_fallback_match(pred, gold)
            return _result(ok, extracted, "exact_fallback", 0.0, f"empty parse ({side})")
        # math-verify tries every match in the box (rightmost first) until one parses, so a box
        # whose whole content does not parse can still yield a fragment of it: a "3" out of
        # "\frac{1}{\sqrt[}{x}^^_\begin{matrix} 3". Only a parse of the first match -- the
        # whole box -- may decide the verdict; otherwise the exact rule does.
        if not _parse_cached(math_verify, pred_in, secs, extraction_mode="first_match"):
            ok = exact_fallback_match(pred, gold)
            return _result(
                ok, extracted, "partial_parse", 0.0, "math-verify parsed only a fragment of the box"
            )
        ok = math_verify.verify(gold_parsed, pred_parsed, timeout_seconds=secs, raise_on_error=True)
        return _result(bool(ok), extracted, "math_verify")
    except TimeoutException as e:
        return _result(exact_fallback_match(pred, gold), extracted, "timeout", 0.0, str(e))
    except MemoryError:
        # The grading worker's address-space limit (grade_batch's memory_gib): a grader error.
        ok = exact_fallback_match(pred, gold)
        return _result(ok, extracted, "error", 0.0, "memory limit reached while grading")
    except Exception as e:
        return _result(exact_fallback_match(pred, gold), extracted, "exact_fallback", 0.0, repr(e))


def grade_response(response: str, gold: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """Grade one model response against the gold answer (protocol in the module docstring).

    Must be called from the main thread (math-verify's timeout uses ``signal.alarm``);
    raises ``RuntimeError`` otherwise. For many items, or from other threads, use
    :func:`grade_batch`, which also enforces a hard per-item timeout.
    """
    t0 = time.perf_counter()
    extracted = extract_last_boxed(response)
    res = _grade_extracted(extracted, gold, timeout_s)
    res["seconds"] = time.perf_counter() - t0
    return res
