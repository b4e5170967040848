"""summarize() and watch(): the batch in flight, steps, indices, kept copies."""

from __future__ import annotations

from collections import UserDict, namedtuple
from dataclasses import dataclass

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.data import DataLoader, TensorDataset

import cudadiag
from cudadiag import step_done, summarize, watch
from cudadiag.batch import active_watch, latest_watch, new_cell


class BatchEncoding(UserDict):
    """Shaped like transformers' BatchEncoding: a dict of tensors."""


Pair = namedtuple("Pair", "features labels")


@dataclass
class Sample:
    image: torch.Tensor
    label: torch.Tensor


def test_paths_structure_and_per_tensor_facts():
    batch = (torch.tensor([[1.0, float("nan")], [float("inf"), -2.0]]),
             {"labels": torch.tensor([3, -1, 3, 7])})
    s = summarize(batch)
    assert s.structure == "tuple[Tensor, dict[labels]]"
    floats = s.tensor("batch[0]")
    assert (floats.nan, floats.inf, floats.min, floats.max) == (1, 1, -2.0, 1.0)
    labels = s.tensor("batch[1]['labels']")
    assert (labels.min, labels.max, labels.negatives, labels.distinct) == (-1, 7, 1, 3)
    assert labels.shape == [4] and labels.dtype == "int64" and labels.stride == [1]
    assert s.batch_size == 2


def test_namedtuples_dataclasses_and_batch_encodings():
    s = summarize(Pair(torch.zeros(2, 3), torch.tensor([0, 1])))
    assert [t.path for t in s.tensors] == ["batch.features", "batch.labels"]
    s = summarize(Sample(torch.zeros(1, 3, 4, 4), torch.tensor([2])))
    assert [t.path for t in s.tensors] == ["batch.image", "batch.label"]
    enc = BatchEncoding(input_ids=torch.tensor([[5, 6, 0], [7, 0, 0]]),
                        attention_mask=torch.tensor([[1, 1, 0], [1, 0, 0]]))
    s = summarize(enc)
    assert s.tensor("batch['input_ids']").max == 7
    assert s.lengths == [2, 1]


def test_non_contiguous_and_large_tensors():
    s = summarize(torch.zeros(4, 6)[:, ::2])
    assert s.tensors[0].contiguous is False and s.tensors[0].stride == [6, 2]
    big = summarize(torch.zeros(100), max_numel=10)
    assert big.tensors[0].min is None
    assert "above the 10 budget" in big.tensors[0].values_skipped


class _NoDeviceWork(TorchDispatchMode):
    """Fails on any operator that touches a non-CPU tensor."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        for a in [*args, *(kwargs or {}).values()]:
            if isinstance(a, torch.Tensor) and a.device.type != "cpu":
                raise AssertionError(f"{func} launched work on {a.device}")
        return func(*args, **(kwargs or {}))


def test_a_summary_never_launches_work_on_a_device():
    on_device = torch.empty(3, 5, device="meta", dtype=torch.long)
    with _NoDeviceWork():
        s = summarize({"ids": on_device, "cpu": torch.tensor([1, 2])})
    ids = s.tensor("batch['ids']")
    assert ids.shape == [3, 5] and ids.device == "meta" and ids.min is None
    assert "metadata only" in ids.values_skipped
    assert s.tensor("batch['cpu']").max == 2


def test_summaries_never_modify_the_batch():
    t = torch.tensor([3, 1, 2])
    summarize([t])
    assert t.tolist() == [3, 1, 2]


def _loader():
    labels = torch.tensor([i % 4 for i in range(30)])
    labels[24:] = torch.tensor([0, 1, 4, 2, 3, 1])  # only the last batch holds the label 4
    return DataLoader(TensorDataset(torch.randn(30, 8), labels), batch_size=8,
                      drop_last=False)


def test_watch_yields_items_unchanged_and_records_steps():
    loader = _loader()
    seen = []
    for _features, labels in watch(loader, name="train"):
        seen.append(labels)
        record = active_watch()
        assert record.name == "train" and record.step == len(seen) - 1
    assert torch.equal(torch.cat(seen), loader.dataset.tensors[1])
    record = latest_watch()
    assert active_watch() is None  # exhausted
    step = record.step_info()
    assert (step.iteration, step.last_completed, step.last_incomplete) == (3, 2, True)
    info = record.batch_info()
    assert info.indices == [24, 25, 26, 27, 28, 29]
    assert info.tensors[1].max == 4 and info.kept_copy


def test_indices_follow_a_shuffling_sampler_without_changing_the_data():
    torch.manual_seed(0)
    loader = DataLoader(TensorDataset(torch.arange(20)), batch_size=5, shuffle=True)
    torch.manual_seed(1)
    expected = [b[0].tolist() for b in loader]
    torch.manual_seed(1)
    got = []
    for (values,) in watch(loader):
        got.append(values.tolist())
        assert active_watch().kept[-1].indices == values.tolist()  # dataset[i] == i
    assert got == expected


def test_indices_with_worker_processes():
    loader = DataLoader(TensorDataset(torch.arange(30)), batch_size=8, shuffle=True,
                        num_workers=2)
    for (values,) in watch(loader):
        assert active_watch().current_indices == values.tolist()  # dataset[i] == i
    assert latest_watch().step == 3


def test_last_completed_is_explicit_with_step_done():
    it = iter(watch([torch.zeros(2), torch.zeros(2)]))
    next(it)
    assert active_watch().last_completed is None
    step_done()
    assert active_watch().last_completed == 0


def test_kept_copies_are_bounded_and_independent_of_in_place_changes():
    batches = [torch.full((4,), float(i)) for i in range(5)]
    for b in watch(batches, keep=2):
        b.add_(100)  # the loop changes the batch in place
    record = latest_watch()
    assert not record.by_reference  # seen at step 1: copies from then on
    assert [k.step for k in record.kept] == [3, 4]
    assert record.batch_at("last").batch.tolist() == [4.0] * 4
    with pytest.raises(LookupError, match="step 0 is not kept"):
        record.batch_at(0)


def test_batches_the_loop_leaves_alone_are_kept_by_reference_not_copied():
    batches = [(torch.full((4,), float(i)), torch.arange(4)) for i in range(3)]
    for _ in watch(batches, keep=2):
        pass
    record = latest_watch()
    assert record.by_reference
    assert all(k.batch is batches[k.step] for k in record.kept)


def test_a_batch_changed_in_place_in_its_own_step_says_so():
    batch = torch.zeros(3)
    for b in watch([batch]):
        b.add_(1)
        break
    record = latest_watch()
    assert record.batch_at("last").batch.tolist() == [1.0] * 3
    assert "changed this batch in place" in record.batch_info().note


def test_a_batch_whose_container_gets_other_tensors_is_given_back_as_received():
    received = torch.arange(3)
    for b in watch([{"x": received, "name": "first"}]):
        b["x"] = b["x"] * 10  # e.g. batch[k] = batch[k].to(device)
    kept = latest_watch().batch_at("last").batch
    assert kept["x"] is received and kept["name"] == "first"


def test_inference_tensors_without_version_counters_are_copied():
    with torch.inference_mode():
        batches = [torch.ones(2)]
    for _ in watch(batches):
        pass
    kept = latest_watch().batch_at("last").batch
    assert kept is not batches[0] and kept.tolist() == [1.0, 1.0]


def test_a_batch_above_max_bytes_keeps_only_its_summary():
    for _ in watch([torch.zeros(1000)], max_bytes=100):
        pass
    record = latest_watch()
    assert record.kept[-1].batch is None
    assert "above max_bytes" in record.batch_info().note
    with pytest.raises(LookupError, match="kept no batch copy"):
        record.batch_at("last")


def test_an_abandoned_watch_is_no_longer_attached_from_the_next_cell_on():
    for _ in watch([torch.zeros(1)] * 3):
        assert active_watch() is not None
        break
    # an exception leaving the loop closes the iterator too: within the cell it still counts
    assert active_watch() is not None
    new_cell()
    assert active_watch() is None


def test_bad_arguments_are_clear():
    with pytest.raises(ValueError, match="keep and max_bytes"):
        watch([], keep=-1)


def test_public_names_are_exported():
    for name in ("summarize", "watch", "step_done", "check_class_targets", "guard",
                 "GuardError", "keep_case", "load_cases"):
        assert getattr(cudadiag, name)
