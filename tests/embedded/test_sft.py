"""The embedded warm start: its batches' gradient, and the teacher layouts it teaches."""

import pandas as pd
import pytest
import torch
from embedded_helpers import ARCHITECTURE

from dashrepro.embedded.sft import accumulate_batch_gradient, build_sft_examples
from dashrepro.embedded.tiny_model import build_tiny_qwen3


def _gradient(model, batch, groups):
    model.zero_grad(set_to_none=True)
    loss = accumulate_batch_gradient(model, batch, pad_id=0, length_groups=groups)
    return loss, torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def test_length_groups_give_the_batch_means_gradient():
    model = build_tiny_qwen3(ARCHITECTURE, 50, pad_token_id=0, eos_token_id=1, seed=0)
    gen = torch.Generator().manual_seed(0)
    lengths = [(5, 3), (40, 30), (12, 4), (33, 29), (7, 2), (25, 20)]  # (length, prompt length)
    batch = [(torch.randint(2, 50, (n,), generator=gen).tolist(), prompt) for n, prompt in lengths]
    loss_one, grad_one = _gradient(model, batch, 1)
    loss_three, grad_three = _gradient(model, batch, 3)
    torch.testing.assert_close(loss_three, loss_one)
    torch.testing.assert_close(grad_three, grad_one, rtol=1e-4, atol=1e-6)
    # ... and it is transformers' own mean next-token loss over the response tokens.
    from dashrepro.embedded.sft import collate_right_padded

    input_ids, attention, labels = collate_right_padded(batch, 0)
    reference = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
    torch.testing.assert_close(loss_one, reference.detach(), rtol=1e-5, atol=1e-6)


class _CharTokenizer:
    eos_token = "<eos>"

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) for c in text]}

    def apply_chat_template(self, messages, **_):
        return "<user>" + messages[0]["content"] + "<assistant>"


#: A phrase only each view's message has.
VIEW_MARKERS = {
    "full": "Analyse the reference.",
    "full_solution": "Privileged Reference (full_solution)",
    "partial_solution": "Privileged Reference (partial_solution)",
    "answer_only": "Verified final answer:",
}


def marked_protocol():
    """A teacher protocol whose message carries the ``full`` view's marker."""
    from dashrepro.data.prompts import TeacherProtocol

    return TeacherProtocol.from_config(
        {
            "analysis_instruction": VIEW_MARKERS["full"],
            "transition_instruction": "Now solve.",
            "teacher_message_template": "{problem} | {reference_solution} | "
            "{analysis_instruction} {transition_instruction}",
        }
    )


@pytest.mark.parametrize("views", [("full",), ("full", "full_solution", "answer_only")])
def test_the_warm_start_teaches_every_configured_teacher_view(views):
    protocol = marked_protocol()
    numbers = range(10, 90)
    frame = pd.DataFrame(
        {
            "problem": [f"What is {a} + 11?" for a in numbers],
            "reference_solution": [
                f"So {a} + 11 = {a + 11}. $\\boxed{{{a + 11}}}$" for a in numbers
            ],
            "answer": [str(a + 11) for a in numbers],
        }
    )
    examples = build_sft_examples(
        frame, _CharTokenizer(), protocol, 0.75, seed=0, teacher_views=views
    )
    prompts = ["".join(map(chr, ids[:n])) for ids, n in examples]
    layouts = {name for p in prompts for name, marker in VIEW_MARKERS.items() if marker in p}
    assert layouts == set(views)
    # The rest are the student's layout: the problem alone (about a quarter of the rows).
    student = [
        (row.problem, p)
        for row, p in zip(frame.itertuples(), prompts, strict=True)
        if not any(marker in p for marker in VIEW_MARKERS.values())
    ]
    assert all(p == f"<user>{problem}<assistant>" for problem, p in student)
    assert 0.1 < len(student) / len(prompts) < 0.45


def test_a_share_of_student_rows_answer_without_reasoning():
    from dashrepro.embedded.sft import no_thinking_target, sft_target

    protocol = marked_protocol()
    numbers = range(10, 410)
    frame = pd.DataFrame(
        {
            "problem": [f"What is {a} + 11?" for a in numbers],
            "reference_solution": [
                f"1 + {a % 10} = {1 + a % 10}.\nSo {a} + 11 = {a + 11}. "
                f"The answer is $\\boxed{{{a + 11}}}$."
                for a in numbers
            ],
            "answer": [str(a + 11) for a in numbers],
        }
    )
    tokenizer = _CharTokenizer()

    def responses(fraction):
        examples = build_sft_examples(
            frame, tokenizer, protocol, 0.5, seed=0, no_thinking_fraction=fraction
        )
        return [("".join(map(chr, ids[:n])), "".join(map(chr, ids[n:]))) for ids, n in examples]

    mixed = responses(0.6)
    teacher = [r for p, r in mixed if VIEW_MARKERS["full"] in p]
    student = [r for p, r in mixed if VIEW_MARKERS["full"] not in p]
    rows = {row.answer: row for row in frame.itertuples()}
    # The teacher always reasons from its reference; a share of student rows skips the steps
    # (an empty think block, as Qwen3 without thinking) and states the answer.
    assert all(r.startswith("<think>\n1 + ") for r in teacher)
    skipped = [r for r in student if r.startswith("<think>\n\n</think>")]
    assert 0.45 < len(skipped) / len(student) < 0.75
    for response in skipped:
        answer = response.split("\\boxed{")[1].split("}")[0]
        assert response == no_thinking_target(answer) + tokenizer.eos_token
    reasoned = [r for r in student if r not in skipped]
    for response in reasoned:
        row = rows[response.split("\\boxed{")[1].split("}")[0]]
        assert response == sft_target(row.reference_solution, row.answer) + tokenizer.eos_token
    # Without the share, the rows (prompts and responses) are the ones drawn before it existed.
    assert [p for p, _ in responses(0.0)] == [p for p, _ in mixed]
    assert not any(r.startswith("<think>\n\n</think>") for _, r in responses(0.0))
