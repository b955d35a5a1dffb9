"""The symbolic benchmark grader behind every reported score (the paper's appendix "Answer
extraction and equivalence checking").

:func:`grade_response` / :func:`grade_batch`: last ``\\boxed{...}`` -> math-verify with a 5 s
timeout -> exact-match fallback; :func:`grade_batch` runs it in killable worker processes. (The
outcome reward of the GRPO hybrid is ``grading.reward``, never used for reported scores.)

Protocol of :func:`grade_response` (the decisions the paper leaves open, made explicit)
--------------------------------------------------------------------------------------
1. ``extracted = extract_last_boxed(response)``; ``None`` -> ``correct=False``,
   ``path="no_boxed"``.
2. Both are normalised (:func:`normalise_box`): surrounding whitespace and newlines
   stripped (``\\boxed{\n8\\sqrt{10}\n}``), trailing sentence punctuation removed
   (``2^{10}.``, ``\\frac{4}{9}.``), and ``\\$`` -- an escaped dollar, a currency sign -- dropped,
   so it is not taken for a math delimiter (``\\$204``). Then each is wrapped in ``$...$``
   when it contains none of the math delimiters ``$``, ``\\(``, ``\\[``.
3. Both are parsed with ``math_verify.parse(s, fallback_mode="no_fallback",
   parsing_timeout=T, raise_on_error=True)`` (default extraction configs), gold first,
   then ``math_verify.verify(gold_parsed, pred_parsed, timeout_seconds=T,
   raise_on_error=True)`` -- gold first because verify is asymmetric. ``T`` is
   ``ceil(timeout_s)`` (``signal.alarm`` only takes whole seconds); default 5 s.
4. The trap of a literal port ("with defaults parse returns [] and verify returns False instead
   of raising, so a literal port never reaches the fallback") is closed two ways:
   ``raise_on_error=True`` makes real parse/verify exceptions propagate, AND an empty
   parse on either side (math-verify swallows latex2sympy failures internally and
   returns ``[]`` even with ``raise_on_error=True``) is treated as a parse failure.
   Both go to the paper's fallback: lowercase exact match after removing ``$`` and
   spaces (``s.replace("$", "").replace(" ", "").lower()``; only the space character
   is removed, as the paper says) -> ``path="exact_fallback"``.
5. math-verify's own (SIGALRM) timeout raises ``TimeoutException`` (a
   ``BaseException``); that is an exception raised by parse/verify, so per the paper the
   verdict comes from the exact fallback, but the sample is recorded with
   ``path="timeout"`` (so ``correct`` is False unless the exact fallback matches). The
   same rule is applied when :func:`grade_batch` hard-kills a stuck worker.
6. ``path="partial_parse"``: math-verify tries the matches in the (wrapped) box from the
   rightmost on until one parses, so a box whose whole content does not parse can still
   yield a fragment (``\\frac{1}{\\sqrt[}{x}^^_ 3`` -> ``3``). The prediction is parsed a
   second time with ``extraction_mode="first_match"`` (the first match only); when that
   parse is empty, the verdict comes from the exact fallback and the sample is recorded
   with this path (counted in the evaluation summary as ``n_partial_parse``).
7. ``path="error"``: anything that is not an exception from math-verify's parse/verify,
   i.e. a failure in this module's own code or a worker process that died on an item
   twice; ``correct`` again comes from the exact fallback, ``error`` holds the reason.
8. No verdict short-cut: every boxed answer goes through math-verify's parse and
   verify; there is no string-equality fast path. The only speed-up is a per-process
   memo of ``math_verify.parse`` results keyed by the input string (parse is
   deterministic and its sympy results immutable, so a hit cannot change a verdict;
   exceptions and timeouts are never memoised, empty parses are). Model output is never ``eval``-ed:
   math-verify parses it with latex2sympy / sympy's ``parse_expr`` only.

9. Answer-form normalisations (issue 24; a deliberate addition to the paper's protocol, made
   visible per sample): when steps 2-7 give ``correct=False`` by ``math_verify``,
   ``exact_fallback`` or ``partial_parse`` (never after a ``timeout`` or ``error``), and the
   normalised box is at most ``NORMALISATION_MAX_CHARS`` characters, the named functions of
   ``NORMALISATIONS`` are applied to the prediction one after the other, in table order, each
   to the previous one's output. After every one that changes the string, the result is
   graded by math-verify again (same parse/first-match/verify rules, the gold's parse reused;
   no exact fallback); the first ``True`` ends the search and the sample is recorded with
   ``path="math_verify"``, ``error=None`` and ``normalisation`` = the names of the
   normalisations that changed the string so far, joined by ``"+"``. The gold is never
   rewritten. Only a ``False`` can become ``True``, so an answer that verifies as written
   never changes verdict, and the paper's plain verdict of a sample is
   ``correct and normalisation is None``. These re-checks share the item's ``timeout_s`` budget
   (each under a SIGALRM of the whole seconds left; none started with under a second left;
   a timeout ends the search and keeps the plain verdict). :func:`count_normalisations`
   counts the verdicts each normalisation changed.

Every result dict has keys ``correct`` (bool), ``extracted`` (str | None), ``path``
(``"math_verify" | "exact_fallback" | "partial_parse" | "no_boxed" | "timeout" | "error"``),
``seconds`` (float, grading wall time of that item), ``error`` (str | None, at most
``ERROR_TEXT_LIMIT`` characters plus a note of how many were cut) and ``normalisation``
(str | None: which normalisations turned a ``False`` into ``True``, step 9).

Threads: math-verify's timeout uses ``signal.alarm``, which only works in the main
thread. :func:`grade_response` therefore refuses to run outside the main thread (it
would otherwise silently degrade to exact matching); ``grading.batch.grade_batch`` works from any
thread because the grading happens in the main thread of worker processes
(``forkserver`` context where available, else ``spawn``). Like any forkserver/spawn
user, a calling *script* needs the ``if __name__ == "__main__":`` guard (the children
import the parent's main module); without it the workers fail to start and grade_batch
raises ``RuntimeError`` after three start-up failures.

What math-verify alone reads literally and step 9 now accepts (each pinned by a test in
``tests/grading``): digit grouping (``1\\,000``, ``1 000``), units and degree signs
(``12°``, ``12\\degree``), modular annotations (``42 \\pmod{1000}``; the annotated number is
taken literally, so ``1042 \\pmod{1000}`` is not 42 -- the AIME gold is the residue itself),
punctuation inside math delimiters (``$42.$``), a ``\\pm`` inside a fraction against the two
roots, and repeating decimals (``0.\\overline{4}`` = 4/9). Still literal: ``\\pm 2`` against a
single-valued gold ``2`` is wrong (it equals the two-valued gold ``2, -2``); ``3, 375`` (comma
and space) is a list, never 3375; ``(3, 375)`` and ``[3, 375]`` stay a tuple and an interval.
math-verify's own reading of the *binary* ``\\mod`` stands (``1042 \\mod 1000`` evaluates to 42
before step 9 is reached).

Hard timeout: with CPython 3.11, sympy 1.14 and math-verify 0.9.0 (no gmpy2), the
exponent tower ``9^{9^{9^{9^{9}}}}`` vs ``1`` is in fact stopped by math-verify's SIGALRM
after ~5 s (big-int arithmetic checks for signals here). The parent-side hard timeout is
the guarantee for inputs the signal cannot stop (a handler swallowed by a bare
``except:``, a long uninterruptible C call); the tests exercise it by setting the signal
timeout beyond the hard timeout.

Run the tests::

    pytest tests/grading -q

and the throughput benchmark::

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
