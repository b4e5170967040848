"""Guards: CPU-side contract checks with precise messages, and guard(module)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from cudadiag import (
    GuardError,
    check_class_targets,
    check_index_range,
    check_label_mapping,
    check_same_device,
    guard,
)


def test_method_example_targets_0_2_4_with_4_classes():
    target = torch.tensor([0, 2, 4])
    with pytest.raises(GuardError) as raised:
        check_class_targets(target, 4)
    err = raised.value
    assert isinstance(err, ValueError)
    assert err.values == [4] and err.positions == [2] and err.argument == "target"
    assert "4 at position 2" in str(err)
    assert "1..4 encoding" in str(err) and "unexpected extra class" in str(err)
    assert "do not widen the output layer" in str(err)
    assert target.tolist() == [0, 2, 4]  # untouched


def test_valid_targets_and_ignore_index_pass():
    check_class_targets(torch.tensor([0, 3, -100]), 4)
    check_class_targets(torch.tensor([[0, 1], [2, 3]]), 4)


def test_dtype_shape_and_emptiness_rules():
    with pytest.raises(GuardError, match=r"must be torch\.long"):
        check_class_targets(torch.tensor([0, 1], dtype=torch.int32), 4)
    with pytest.raises(GuardError, match="every target equals ignore_index=-100"):
        check_class_targets(torch.tensor([-100, -100]), 4)
    with pytest.raises(GuardError, match="0-dimensional"):
        check_class_targets(torch.tensor(1), 4)


def test_first_ten_offending_values_and_positions():
    target = torch.arange(30) % 7  # values 4, 5, 6 are out of range for 4 classes
    with pytest.raises(GuardError) as raised:
        check_class_targets(target, 4)
    assert len(raised.value.values) == 10
    assert raised.value.positions[:3] == [4, 5, 6]
    assert "12 value(s) outside [0, 4)" in str(raised.value)


def test_probability_targets_are_checked_for_range_and_row_sums():
    logits = torch.randn(2, 3)
    check_class_targets(torch.tensor([[0.2, 0.3, 0.5], [1.0, 0.0, 0.0]]), 3, input=logits)
    with pytest.raises(GuardError, match="do not sum to 1") as raised:
        check_class_targets(torch.tensor([[0.2, 0.3, 0.6], [1.0, 0.0, 0.0]]), 3, input=logits)
    assert raised.value.positions == [0]
    with pytest.raises(GuardError, match=r"outside \[0, 1\]"):
        check_class_targets(torch.tensor([[1.5, -0.5, 0.0], [1.0, 0.0, 0.0]]), 3, input=logits)
    with pytest.raises(GuardError, match="input's shape"):
        check_class_targets(torch.ones(2, 4) / 4, 3, input=logits)


def test_index_range_for_embeddings():
    with pytest.raises(GuardError) as raised:
        check_index_range(torch.tensor([[1, 2], [9, 0]]), 5, name="input_ids")
    assert raised.value.values == [9] and raised.value.positions == [(1, 0)]
    assert str(raised.value).startswith("input_ids: 1 value(s) outside [0, 5)")
    check_index_range(torch.tensor([-1, 4]), 5, allow_negative=True)
    with pytest.raises(GuardError, match="integer tensor"):
        check_index_range(torch.tensor([1.0]), 5)


def test_same_device_names_parameters_and_inputs():
    model = torch.nn.Linear(2, 2)
    check_same_device(model, torch.zeros(2))
    with pytest.raises(GuardError) as raised:
        check_same_device(model, torch.zeros(2, device="meta"))
    text = str(raised.value)
    assert "cpu: model.weight, model.bias" in text and "meta: arg1" in text


def test_label_mapping_must_be_a_bijection():
    check_label_mapping({"cat": 0, "dog": 1, "bird": 2}, ["cat", "dog", "bird"])
    with pytest.raises(GuardError) as raised:
        check_label_mapping({"cat": 1, "dog": 1, "fish": 3}, ["cat", "dog", "bird"])
    text = str(raised.value)
    assert "class names without an index: ['bird']" in text
    assert "labels that are not class names: ['fish']" in text
    assert "indices shared by several labels: {1: ['cat', 'dog']}" in text
    assert "indices outside [0, 3): {'fish': 3}" in text
    assert "indices no label maps to: [0, 2]" in text


class _Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 4)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, ids, target):
        return self.loss(self.head(self.emb(ids).mean(1)), target)


def test_guard_hooks_embeddings_and_losses_and_comes_off():
    net = _Net()
    handle = guard(net)
    assert sorted(handle.modules) == ["emb", "loss"]
    ids = torch.tensor([[1, 2], [3, 4]])
    net(ids, torch.tensor([0, 3]))
    with pytest.raises(GuardError, match="emb input: 1 value"):
        net(torch.tensor([[1, 12], [3, 4]]), torch.tensor([0, 3]))
    with pytest.raises(GuardError, match=r"loss target: 1 value.*4 at position 1"):
        net(ids, torch.tensor([0, 4]))
    handle.remove()
    with pytest.raises(IndexError, match="Target 4 is out of bounds"):
        net(ids, torch.tensor([0, 4]))


def test_guard_on_a_bare_loss_uses_its_ignore_index():
    loss = torch.nn.NLLLoss(ignore_index=0)
    with guard(loss):
        loss(F.log_softmax(torch.randn(2, 3), 1), torch.tensor([0, 2]))
        with pytest.raises(GuardError, match=r"ignore_index=0"):
            loss(F.log_softmax(torch.randn(2, 3), 1), torch.tensor([0, 3]))
