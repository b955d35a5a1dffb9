"""The outcome-level reward grader of the GRPO hybrid: last boxed answer, EleutherAI/Hendrycks
``strip_string`` normalisation, exact string equality. Pure string work (no math-verify, no
timeout); never used for reported scores (those come from ``grading.symbolic``).

    reward_exact_match("so \\boxed{\\frac12}", "\\frac{1}{2}")  # 1.0
"""

from __future__ import annotations

from dashrepro.grading.symbolic import extract_last_boxed

__all__ = ["reward_exact_match", "strip_string"]


# ---------------------------------------------------------------------------------------
# Outcome-level reward grader: Hendrycks/EleutherAI strip_string + exact match
# ---------------------------------------------------------------------------------------


def _fix_fracs(s: str) -> str:
    """``\\frac12`` -> ``\\frac{1}{2}``, ``\\frac1{72}`` -> ``\\frac{1}{72}``."""
    parts = s.split("\\frac")
    out = parts[0]
    for part in parts[1:]:
        out += "\\frac"
        if part.startswith("{"):
            out += part
            continue
        if len(part) < 2:
            return s  # malformed: leave the whole string unchanged (as the original)
        a, b, tail = part[0], part[1], part[2:]
        if b == "{":
            out += "{" + a + "}" + b + tail
        else:
            out += "{" + a + "}{" + b + "}" + tail
    return out


def _fix_a_slash_b(s: str) -> str:
    """A string that is exactly ``int/int`` becomes ``\\frac{a}{b}``."""
    pieces = s.split("/")
    if len(pieces) != 2:
        return s
    try:
        a, b = int(pieces[0]), int(pieces[1])
    except ValueError:
        return s
    if s != f"{a}/{b}":
        return s
    return "\\frac{" + str(a) + "}{" + str(b) + "}"


def _remove_right_units(s: str) -> str:
    """Drop everything from ``\\text{ `` (with the space: units) on."""
    if "\\text{ " not in s:
        return s
    pieces = s.split("\\text{ ")
    if len(pieces) != 2:
        # The original asserts exactly one unit block; its is_equiv then falls back to
        # comparing the raw strings. reward_exact_match does the same.
        raise ValueError("more than one '\\text{ ' unit block")
    return pieces[0]


def _fix_sqrt(s: str) -> str:
    """``\\sqrt3`` -> ``\\sqrt{3}`` (one character argument)."""
    if "\\sqrt" not in s:
        return s
    parts = s.split("\\sqrt")
    out = parts[0]
    for part in parts[1:]:
        if part and part[0] != "{":
            out += "\\sqrt{" + part[0] + "}" + part[1:]
        else:
            out += "\\sqrt" + part
    return out


def strip_string(string: str) -> str:
    """Hendrycks-MATH / lm-evaluation-harness ``strip_string`` answer normalisation.

    In order: drop newlines and ``\\!``; ``\\\\`` -> ``\\``; ``tfrac``/``dfrac`` ->
    ``frac``; drop ``\\left``/``\\right``, degree marks ``^{\\circ}``/``^\\circ``, ``\\$``;
    drop units (``\\text{ ...`` to the end); drop ``\\%``; ``" ."``/``"{."`` -> ``" 0."``/
    ``"{0."`` and a leading ``.`` gets a ``0``; a short left-hand side ``k=`` (at most two
    characters before the single ``=``) is removed; ``\\sqrt3`` -> ``\\sqrt{3}``; all
    spaces removed; ``\\frac12`` -> ``\\frac{1}{2}``; exactly ``0.5`` -> ``\\frac{1}{2}``;
    exactly ``a/b`` with integers -> ``\\frac{a}{b}``.

    Raises ``ValueError`` where the original asserts (more than one ``\\text{ `` unit
    block); :func:`reward_exact_match` then compares the raw strings, like the original
    ``is_equiv``.
    """
    s = string.replace("\n", "")
    s = s.replace("\\!", "")
    s = s.replace("\\\\", "\\")
    s = s.replace("tfrac", "frac").replace("dfrac", "frac")
    s = s.replace("\\left", "").replace("\\right", "")
    s = s.replace("^{\\circ}", "").replace("^\\circ", "")
    s = s.replace("\\$", "")
    s = _remove_right_units(s)
    s = s.replace("\\%", "")
    s = s.replace(" .", " 0.").replace("{.", "{0.")
    if not s:
        return s
    if s[0] == ".":
        s = "0" + s
    eq = s.split("=")
    if len(eq) == 2 and len(eq[0]) <= 2:
        s = eq[1]
    s = _fix_sqrt(s)
    s = s.replace(" ", "")
    s = _fix_fracs(s)
    if s == "0.5":
        s = "\\frac{1}{2}"
    s = _fix_a_slash_b(s)
    return s


def reward_exact_match(response: str, gold: str) -> float:
    """Outcome reward: 1.0 if the last boxed answer equals the gold after ``strip_string``.

    No box -> 0.0. If the gold itself contains a box, its last boxed content is used. If
    normalisation raises on either side, the raw (unnormalised) strings are compared, as
    in the original ``is_equiv``. Pure string work: no math-verify, no timeout needed.
    """
    pred = extract_last_boxed(response)
    if pred is None:
        return 0.0
    if "\\boxed" in gold or "\\fbox" in gold:
        boxed_gold = extract_last_boxed(gold)
        if boxed_gold is not None:
            gold = boxed_gold
    try:
        return 1.0 if strip_string(pred) == strip_string(gold) else 0.0
    except Exception:
        return 1.0 if pred == gold else 0.0
