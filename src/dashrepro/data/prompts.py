"""Student and privileged-teacher prompts, as in the paper's appendix "Matched OPSD-family prompts".

The student sees the problem alone (chat template, thinking on, no instruction). The privileged
teacher -- the same network, adapter disabled -- sees the problem, the reference solution and
the protocol's two instruction strings, joined as ``protocol.teacher_context`` says
(``literal``, ``transition_only`` or ``reason_first``: docs/prompts.md). Both go through
``tokenizer.apply_chat_template``, so the real Qwen3 tokenizer and the tiny one share the code.

    protocol = TeacherProtocol.from_config(config["protocol"])
    student = render_student_prompt(tokenizer, problem)
    teacher = render_teacher_prompt(tokenizer, problem, reference_solution, protocol)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

#: The teacher's user message of the reference collators without the generated analysis
#: (duykhuongnguyen/AVSD ``src/avsd/math/data_collator.py`` lines 161-168, SaFo-Lab/PW-OPSD
#: ``code/data_collator.py`` lines 97-112, both with ``reason_first`` off, as every released
#: launcher runs them): the problem, the delimited reference solution, the transition
#: instruction (the collators' ``transition_prompt`` is it with "\n\n" before and "\n" after),
#: and the boxed line.
TRANSITION_ONLY_TEMPLATE = (
    "Problem: {problem}\n\n"
    "Here is a reference solution to this problem:\n"
    "=== Reference Solution Begin ===\n{reference_solution}\n=== Reference Solution End ===\n"
    "\n\n{transition_instruction}\n"
    "\nPlease reason step by step, and put your final answer within \\boxed{{}}."
)

#: The request for an analysis in ``reason_first`` mode, as siyan-zhao/OPSD ``data_collator.py``
#: (lines 61-79) and duykhuongnguyen/AVSD ``src/avsd/math/data_collator.py`` (lines 137-159)
#: build it: their ``reason_first_prompt`` is the analysis instruction with "\n\n" before and
#: "\n" after, and no newline separates "problem:" from the opening delimiter.
REASON_FIRST_TEMPLATE = (
    "Problem: {problem}\n\n"
    "Here is a correct reasoning to this problem:"
    "=== Reference Reasoning Start ===\n"
    "{reference_solution}\n"
    "=== Reference Reasoning End ===\n\n"
    "\n\n{analysis_instruction}\n"
)

#: What ``reason_first`` appends, untemplated, after the generated analysis (the collators'
#: ``transition_text``: "\n" + transition_prompt + "\n" + the boxed line, where
#: ``transition_prompt`` is the transition instruction with "\n\n" before and "\n" after).
REASON_FIRST_TRANSITION = (
    "\n\n\n{transition_instruction}\n"
    "\nPlease reason step by step, and put your final answer within \\boxed{{}}."
)

#: ``protocol.teacher_context``: ``literal`` (the configured ``teacher_message_template``, both
#: instruction strings in one message), ``transition_only`` (the reference collators' layout
#: without an analysis) or ``reason_first`` (the teacher generates an analysis first).
TEACHER_CONTEXTS = ("literal", "transition_only", "reason_first")

#: The longest generated analysis in ``reason_first`` mode: siyan-zhao/OPSD ``opsd_trainer.py``
#: reads ``getattr(args, "max_reasoning_length", 4096)``, a field its config does not have.
ANALYSIS_MAX_TOKENS = 4096


@dataclass(frozen=True)
class TeacherProtocol:
    """How the privileged teacher's user message is built (all from the config's ``protocol``)."""

    template: str
    analysis_instruction: str
    transition_instruction: str
    context: str = "literal"
    analysis_max_tokens: int = ANALYSIS_MAX_TOKENS

    @classmethod
    def from_config(cls, protocol: Mapping) -> TeacherProtocol:
        context = protocol.get("teacher_context", "literal")
        if context not in TEACHER_CONTEXTS:
            raise ValueError(
                f"protocol.teacher_context: {context!r} is not one of {TEACHER_CONTEXTS}"
            )
        return cls(
            template=protocol["teacher_message_template"],
            analysis_instruction=protocol["analysis_instruction"],
            transition_instruction=protocol["transition_instruction"],
            context=context,
            analysis_max_tokens=int(protocol.get("analysis_max_tokens", ANALYSIS_MAX_TOKENS)),
        )

    def to_config(self) -> dict:
        """The ``protocol`` keys this protocol was read from; ``from_config`` reads them back."""
        return {
            "teacher_message_template": self.template,
            "analysis_instruction": self.analysis_instruction,
            "transition_instruction": self.transition_instruction,
            "teacher_context": self.context,
            "analysis_max_tokens": self.analysis_max_tokens,
        }

    @property
    def generates_analysis(self) -> bool:
        """Whether the teacher writes an analysis before it scores (``reason_first``)."""
        return self.context == "reason_first"

    def transition_text(self) -> str:
        """``reason_first``: the raw text between the generated analysis and the rollout."""
        return REASON_FIRST_TRANSITION.format(transition_instruction=self.transition_instruction)

    def user_message(self, problem: str, reference_solution: str) -> str:
        """The teacher's user message; in ``reason_first`` mode the request for an analysis."""
        if not reference_solution or not reference_solution.strip():
            raise ValueError("the privileged teacher needs a non-empty reference solution")
        if self.context == "reason_first":
            return REASON_FIRST_TEMPLATE.format(
                problem=problem,
                reference_solution=reference_solution,
                analysis_instruction=self.analysis_instruction,
            )
        if self.context == "transition_only":
            return TRANSITION_ONLY_TEMPLATE.format(
                problem=problem,
                reference_solution=reference_solution,
                transition_instruction=self.transition_instruction,
            )
        return self.template.format(
            problem=problem,
            reference_solution=reference_solution,
            analysis_instruction=self.analysis_instruction,
            transition_instruction=self.transition_instruction,
        )


#: The evaluation prompts (``evaluation.prompt``): what follows the problem in the user turn.
#: ``boxed_instruction`` is the OPSD evaluation script's (siyan-zhao/OPSD
#: ``eval/evaluate_math.py``: ``f"{problem}\n\nPlease reason step by step, and put your final
#: answer within \\boxed{{}}."``), which the paper's grading protocol and the Base/SFT/GRPO rows it
#: copies from Zhao et al. follow; ``problem`` is the bare problem (the training prompt).
EVALUATION_INSTRUCTIONS: dict[str, str | None] = {
    "problem": None,
    "boxed_instruction": "Please reason step by step, and put your final answer within \\boxed{}.",
}


def render_student_prompt(tokenizer, problem: str, instruction: str | None = None) -> str:
    """The student's prompt text: the problem (then ``instruction`` after a blank line, if
    given) in the chat template, thinking mode on."""
    content = problem if instruction is None else f"{problem}\n\n{instruction}"
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": content}],
        tokenize=False,
        add_generation_prompt=True,
        enable_thinking=True,
    )


def render_user_turn(tokenizer, content: str) -> str:
    """One user turn in the chat template, thinking mode on, ready for the assistant's reply."""
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": content}],
        tokenize=False,
        add_generation_prompt=True,
        enable_thinking=True,
    )


def render_teacher_prompt(
    tokenizer, problem: str, reference_solution: str, protocol: TeacherProtocol
) -> str:
    """The privileged teacher's prompt text; it scores the student's tokens after this prefix."""
    return render_user_turn(tokenizer, protocol.user_message(problem, reference_solution))
