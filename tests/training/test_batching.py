"""Tests of dashrepro.training.batching: padding, response logits and which rows a micro-batch
reads."""

import torch

from dashrepro.training.batching import response_logits, right_pad_concat


def test_response_logits_picks_the_positions_that_predict_each_response_token():
    prompts, responses = [[1, 2, 3], [4]], [[7, 8], [9, 10]]
    ids, mask, lengths = right_pad_concat(prompts, responses, pad_id=0)
    assert ids.tolist() == [[1, 2, 3, 7, 8], [4, 9, 10, 0, 0]]
    assert mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]
    # logits[b, p] = one-hot of the *next* input token, so the gathered rows must equal the response.
    vocab = 16
    logits = torch.zeros(2, ids.shape[1], vocab)
    for b in range(2):
        for p in range(ids.shape[1] - 1):
            logits[b, p, ids[b, p + 1]] = 1.0
    picked = response_logits(logits, lengths, response_width=2).argmax(-1)
    assert picked.tolist() == responses


def test_grpo_groups_may_span_micro_batches_of_one_process():
    from dashrepro.training.batching import BatchLayout, rollout_rows

    # 8 rollouts per problem, 2 per micro-batch, 8 micro-batches: 2 problems per process-step,
    # each spread over 4 consecutive micro-batches.
    grouped = BatchLayout(micro=2, accum=8, world=1, rank=0, group=8)
    shares = [rollout_rows(50, 0, 1, grouped, a) for a in range(8)]
    first, second = shares[0][0], shares[4][0]
    assert first != second
    assert shares[:4] == [[first, first]] * 4 and shares[4:] == [[second, second]] * 4
    # Without groups each micro-batch reads its own problems, disjoint within the step.
    plain = [rollout_rows(50, 0, 1, BatchLayout(micro=2, accum=4), a) for a in range(4)]
    assert len({row for share in plain for row in share}) == 8


def test_two_processes_read_what_one_process_accumulating_reads():
    from dashrepro.training.batching import BatchLayout, rollout_rows

    one = [rollout_rows(50, 0, 3, BatchLayout(micro=2, accum=2), a) for a in range(2)]
    two = [
        rollout_rows(50, 0, 3, BatchLayout(micro=2, accum=1, world=2, rank=r), 0) for r in (0, 1)
    ]
    assert one == two


def test_the_teacher_reads_with_the_adapter_off_and_the_student_with_it_on():
    from training_helpers import make_run

    from dashrepro.training.batching import student_response_logits, teacher_response_logits

    model, _, _ = make_run(lora_seed=1)
    model.eval()
    for name, parameter in model.named_parameters():
        if "lora_B" in name:  # B = 0 at init would hide which weights were read
            torch.nn.init.normal_(parameter, std=0.5)
    prompts, responses = [[1, 2, 3], [4]], [[7, 8], [9, 10, 11]]
    contexts = [[[5, 5, *p], p] for p in prompts]  # two views per rollout
    teacher = teacher_response_logits(model, contexts, responses, pad_id=0, device="cpu")
    student = student_response_logits(model, prompts, responses, pad_id=0, device="cpu")
    with torch.no_grad(), model.disable_adapter():
        ids, _, lengths = right_pad_concat(prompts, responses, pad_id=0)
        base = response_logits(model(input_ids=ids).logits, lengths, 3)
    assert len(teacher) == 2 and teacher[0].dtype == torch.float32
    assert not teacher[1].requires_grad and student.requires_grad
    # The second view is the student's own prompt: the adapter alone tells the logits apart.
    assert torch.allclose(teacher[1][0], base[0]) and torch.allclose(teacher[1][1, :3], base[1])
    assert not torch.allclose(student, teacher[1], atol=1e-3)
    assert not torch.allclose(teacher[0][0], teacher[1][0], atol=1e-4)
