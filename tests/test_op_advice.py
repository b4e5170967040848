"""Advice that fits the operator, the values and the case: first checks keyed by the failing
operator's kind of index, value patterns stated in words (method point 7 for class targets,
token ids and tables), at most five lines, one per topic, none the case already answered,
commands for the surface the user is on (issue 21, items 2 and 3)."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from advice_review import assert_class_target_readings, assert_fitted, contradictions
from cudadiag import classify, incidents, knowledge
from cudadiag.advice import Case, advise, fitted
from cudadiag.explain import explain_text
from cudadiag.incident import ErrorInfo, Incident, RunInfo
from cudadiag.testing import simulated_cuda
from cudadiag.trace import OpTracer, PrecheckError
from scenarios import run

EMBEDDING_CHECK = "Token ids must lie in [0, num_embeddings)"
TARGET_CHECK = "Class targets must lie in [0, C)"
INDEX_CHECK = "Each index must be smaller than the size of the dimension"
ASSERT_LINE = ("/pytorch/aten/src/ATen/native/cuda/Loss.cu:250: "
               "nll_loss_forward_reduce_cuda_kernel_2d: block: [0,0,0], thread: [2,0,0] "
               "Assertion `t >= 0 && t < n_classes` failed.\n")
DEVICE_ASSERT = ("RuntimeError: CUDA error: device-side assert triggered\nCUDA kernel errors "
                 "might be asynchronously reported at some other API call, so the stacktrace "
                 "below might be incorrect.\nFor debugging consider passing "
                 "CUDA_LAUNCH_BLOCKING=1")


def _prechecked(fail) -> Incident:
    """The incident an isolated run gives: the op under the tracer with prechecks, as the
    worker runs it."""
    with OpTracer() as tracer, pytest.raises(PrecheckError) as info:
        fail()
    exc = info.value
    incident = Incident(error=ErrorInfo.from_exception(exc), diagnosis=classify(exc),
                        run=RunInfo(mode="isolated", blocking=True), op=tracer.failed)
    advise(incident, exc.violation)
    return incident


def _checks(fail) -> list[str]:
    return _prechecked(fail).diagnosis.first_checks


def _loss(targets: list[int], classes: int, **kwargs):
    return lambda: F.cross_entropy(torch.randn(len(targets), classes),
                                   torch.tensor(targets), **kwargs)


def test_labels_1_to_c_without_a_0_name_both_readings_and_the_evidence_that_separates_them():
    checks = _checks(_loss([1, 3, 2, 3, 1, 2], 3))
    assert checks[0].startswith("target 3 for 3 output columns (valid [0, 3); these targets "
                                "span 1..3, no 0): labels numbered 1..3, or a class the model "
                                "was not built for")
    assert_class_target_readings(checks, 3)
    assert_fitted(checks)


def test_the_methods_example_reads_an_unexpected_fifth_class_or_1_based_never_a_wider_layer():
    incident = _prechecked(_loss([0, 2, 4], 4))
    checks = incident.diagnosis.first_checks
    assert checks[0].startswith("target 4 for 4 output columns (valid [0, 4); these targets "
                                "span 0..4): a class the model was not built for, or labels "
                                "numbered 1..4")
    assert "5 distinct values, 0 among them, reads as an unexpected 5th class" in checks[0]
    assert_class_target_readings(checks, 4)
    assert contradictions(checks, incident.diagnosis.avoid) == []
    assert ("Subtracting 1 from every label before knowing that every source numbers them "
            "1..C.") in incident.diagnosis.avoid


def test_padding_minus_one_is_not_ignored_by_the_default_ignore_index():
    checks = _checks(_loss([0, 1, -1, -1], 3))
    assert checks[0].startswith("−1 among the targets, and the loss skips only "
                                "ignore_index=-100: if −1 marks padding or unlabeled positions, "
                                "pad with -100 or pass ignore_index=-1")
    assert "dict.get(label, -1)" in checks[0]
    assert not any(c.startswith("Padding and unlabeled targets") for c in checks)  # said once


def test_padding_minus_one_is_fine_when_it_is_the_ignore_index():
    F.cross_entropy(torch.randn(4, 3), torch.tensor([0, 1, -1, -1]), ignore_index=-1)
    checks = _checks(_loss([0, 1, -1, 7], 3, ignore_index=-1))
    assert not any("−1 among the targets" in c for c in checks)


def test_a_token_id_equal_to_the_vocabulary_size_at_the_embedding():
    emb = torch.nn.Embedding(50, 8)
    checks = _checks(lambda: emb(torch.tensor([[1, 50, 3]])))
    assert checks[0].startswith("a token id equals the vocabulary size (50): a token given its "
                                "id after the embedding was sized")
    assert any("share one vocabulary" in c for c in checks)
    assert any("resize_token_embeddings" in c for c in checks)
    assert any("padding_idx" in c for c in checks)


def test_token_ids_far_beyond_the_vocabulary_point_at_another_tokenizer():
    emb = torch.nn.Embedding(1000, 8)
    checks = _checks(lambda: emb(torch.tensor([5, 30000, 12])))
    assert checks[0].startswith("token ids reach 30000 for an embedding of 1000: the "
                                "tokenizer and the model do not share a vocabulary")


def test_a_target_token_id_equal_to_the_vocabulary_size_gets_token_advice_not_one_class_more():
    embed, head = torch.nn.Embedding(18, 8), torch.nn.Linear(8, 18)
    ids = torch.tensor([[3, 7, 11, 18]])  # <eos> got id 18 after the model was sized
    checks = _checks(lambda: F.cross_entropy(head(embed(ids[:, :-1])).reshape(-1, 18),
                                             ids[:, 1:].reshape(-1)))
    assert checks[0].startswith("a target token id equals the vocabulary size (18): the "
                                "loss's 18 classes are the model's vocabulary")
    assert "not one class more" in checks[0]
    assert any("share one vocabulary" in c for c in checks)
    assert not any(TARGET_CHECK in c or "labels numbered" in c for c in checks)


def test_a_character_gpt_with_more_positions_than_tokens_still_takes_token_targets():
    tok, pos, head = torch.nn.Embedding(65, 8), torch.nn.Embedding(256, 8), torch.nn.Linear(8, 65)
    idx, targets = torch.tensor([[1, 2, 3]]), torch.tensor([[2, 3, 65]])
    checks = _checks(lambda: F.cross_entropy(
        head(tok(idx) + pos(torch.arange(3))).view(-1, 65), targets.view(-1)))
    assert checks[0].startswith("a target token id equals the vocabulary size (65)")


def test_a_binary_classifier_over_a_two_row_token_type_table_takes_class_targets():
    """BERT's token-type table has 2 rows, as many as a binary classifier's classes: only the
    vocabulary, looked up first, makes targets token ids."""
    words, types, head = (torch.nn.Embedding(100, 8), torch.nn.Embedding(2, 8),
                          torch.nn.Linear(8, 2))
    ids, segments = torch.tensor([[5, 7, 9]]), torch.zeros(1, 3, dtype=torch.long)
    labels = torch.tensor([2])  # labels numbered 1 and 2
    checks = _checks(lambda: F.cross_entropy(head((words(ids) + types(segments)).mean(1)),
                                             labels))
    assert checks[0].startswith("target 2 for 2 output columns")


def test_the_same_target_without_an_embedding_of_that_size_is_a_class_target():
    checks = _checks(_loss([0, 2, 18], 18))
    assert checks[0].startswith("target 18 for 18 output columns")
    assert not any("language model" in c for c in checks)  # the tracer saw no vocabulary


def test_a_row_beyond_a_table_sized_by_a_constant_is_a_new_category_not_an_off_by_one():
    table = torch.randn(27, 10)  # '.' and 26 letters; the data has a 28th symbol
    checks = _checks(lambda: table[torch.tensor([[0, 27, 3], [1, 2, 3]])])
    assert checks[0].startswith("an index equals the size of the dimension it indexes (27; "
                                "valid [-27, 27))")  # t[idx] counts negatives from the end
    assert "a 28th value where the table holds 27 — a new category in the data, not an " \
           "off-by-one" in checks[0]
    assert "len(stoi)" in checks[0]


def test_gather_index_equal_to_the_dimension_size_and_negative_indices():
    source = torch.randn(3, 4)
    equal = _checks(lambda: source.gather(1, torch.tensor([[0, 4], [1, 2], [3, 0]])))
    assert equal[0].startswith("an index equals the size of the dimension it indexes (4; "
                               "valid [0, 4))")
    assert "Computed (a length, an offset), it may be off by one" in equal[0]
    negative = _checks(lambda: source.gather(1, torch.tensor([[0, -1], [1, 2], [3, 0]])))
    assert negative[0].startswith("negative indices [-1]: this operator does not wrap them")
    assert any(c.startswith(INDEX_CHECK) for c in negative)


def test_the_embedding_case_and_the_loss_target_case_get_different_advice():
    emb = torch.nn.Embedding(4, 8)
    embedding = _checks(lambda: emb(torch.tensor([0, 2, 4])))
    target = _checks(_loss([0, 2, 4], 4))
    assert "token id" in embedding[0] and "class names" not in " ".join(embedding)
    assert "output columns" in target[0] and "token id" not in " ".join(target)


def test_every_case_gets_at_most_five_distinct_checks():
    facts = sorted(knowledge.CASE_FACTS)
    kinds = [(), *((a.kind,) for a in knowledge.OPERATOR_ADVICE), ("embedding", "index")]
    for family, kind, surface, n in itertools.product(
            knowledge.FAMILY_NAMES, kinds, knowledge.SURFACES, range(len(facts) + 1)):
        for subset in itertools.combinations(facts, n):
            checks, _ = fitted(family, {}, kinds=kind, case=Case(surface, frozenset(subset)))
            assert_fitted(checks)


def test_a_kernel_incident_says_the_class_target_rule_once_and_points_at_the_magic():
    checks, avoid = fitted("device_assert", {"assertion": "t >= 0 && t < n_classes"},
                           kinds=("class_target",))
    assert_fitted(checks)
    assert sum("[0, C)" in c for c in checks) == 1
    assert checks[-1] == ("Name the operator that really failed: re-run the cell isolated with "
                          "blocking launches (%cuda_isolate).")
    assert any(a.startswith("The line in the traceback") for a in avoid)


def test_an_isolated_run_stopped_by_the_precheck_is_not_told_what_it_already_answered():
    with simulated_cuda():
        d = _prechecked(_loss([0, 2, 4], 4)).diagnosis
    assert d.family == "device_assert"
    text = " ".join(d.first_checks)
    assert "%cuda_isolate" not in text and "cudadiag run" not in text  # it is isolated
    assert "Read the assertion line" not in text  # the kernel never ran: none was printed
    assert not any(a.startswith("The line in the traceback") for a in d.avoid)  # raised at it
    assert "Restarting the kernel fixes it" in " ".join(d.avoid)


def test_the_assertion_line_is_worth_reading_only_when_one_was_printed_and_not_read():
    without = classify(DEVICE_ASSERT)
    assert not any("Read the assertion line" in c for c in without.first_checks)
    unknown_kernel = classify("Foo.cu:12: my_kernel: block: [0,0,0], thread: [0,0,0] "
                              "Assertion `x < n` failed.\n" + DEVICE_ASSERT)
    assert any("Read the assertion line" in c for c in unknown_kernel.first_checks)
    read = classify(ASSERT_LINE + DEVICE_ASSERT)
    incident = Incident(error=ErrorInfo(type="RuntimeError", message="", text=ASSERT_LINE),
                        diagnosis=read, run=RunInfo(mode="kernel"))
    advise(incident)
    assert not any("Read the assertion line" in c for c in incident.diagnosis.first_checks)
    assert incident.diagnosis.first_checks[0].startswith(TARGET_CHECK)


def test_a_script_run_without_blocking_launches_is_told_the_cli_command_not_a_magic():
    incident = Incident(error=ErrorInfo(type="RuntimeError", message="", text=ASSERT_LINE),
                        diagnosis=classify(ASSERT_LINE + DEVICE_ASSERT),
                        run=RunInfo(mode="cli", blocking=False, command=["train.py", "--lr=1"]))
    advise(incident)
    d = incident.diagnosis
    assert any("`cudadiag run -- python train.py` (blocking launches" in c
               for c in d.first_checks)
    assert "%" not in " ".join(d.first_checks + d.avoid)
    assert "Restarting the process fixes it" in " ".join(d.avoid)


def test_a_log_is_told_the_cli_command_and_the_operators_checks():
    d = explain_text(ASSERT_LINE + DEVICE_ASSERT).diagnosis
    assert d.first_checks[0].startswith(TARGET_CHECK)
    assert any("re-run the program with `cudadiag run -- python your_script.py`" in c
               for c in d.first_checks)
    assert_fitted(d.first_checks)


@pytest.mark.parametrize(("cell", "expected", "absent"), [
    ("emb = torch.nn.Embedding(50, 8)\nout = emb(torch.tensor([[1, 50, 3]]))\nout.sum().item()",
     EMBEDDING_CHECK, TARGET_CHECK),
    ("loss = F.cross_entropy(torch.randn(3, 4), torch.tensor([1, 2, 4]))\nloss.item()",
     TARGET_CHECK, EMBEDDING_CHECK),
], ids=["embedding", "loss_target"])
def test_in_the_kernel_the_device_assertion_names_the_kind_of_index(shell, capsys, cell,
                                                                      expected, absent):
    # pytest re-points fds 1/2 between setup and call: load again to read the device's lines
    shell.extension_manager.reload_extension("cudadiag")
    run(shell, "import torch, torch.nn.functional as F\n"
               "from cudadiag.testing import simulated_cuda\nsim = simulated_cuda().start()")
    run(shell, cell)
    (incident,) = incidents()
    assert incident.diagnosis.first_checks[0].startswith(expected)
    assert absent not in " ".join(incident.diagnosis.first_checks)
    assert f"check first: {expected}" in capsys.readouterr().err


def test_the_kernel_incident_never_uses_values_a_real_device_does_not_tell(shell):
    """The simulator knows the offending values; a real device prints only its kernel."""
    shell.extension_manager.reload_extension("cudadiag")
    run(shell, "import torch, torch.nn.functional as F\n"
               "from cudadiag.testing import simulated_cuda\nsim = simulated_cuda().start()")
    run(shell, "F.cross_entropy(torch.randn(4, 4), torch.tensor([1, 2, 3, 4])).item()")
    (incident,) = incidents()
    checks = incident.diagnosis.first_checks
    assert checks[0].startswith(TARGET_CHECK)
    assert not any("these targets span" in c or "output columns" in c for c in checks)
    assert checks[-1].endswith("(%cuda_isolate).")


@pytest.mark.parametrize(("cell", "expected"), [
    ("torch.nn.Embedding(5, 3)(torch.tensor([1, 5]))", EMBEDDING_CHECK),
    ("F.nll_loss(torch.randn(2, 3), torch.tensor([0, 3]))", TARGET_CHECK),
], ids=["embedding", "nll_loss"])
def test_cpu_errors_are_keyed_by_the_function_that_raised(shell, cell, expected):
    run(shell, "import torch, torch.nn.functional as F")
    run(shell, cell)
    (incident,) = incidents()
    assert incident.diagnosis.family == "index_out_of_bounds"
    assert incident.diagnosis.first_checks[0].startswith(expected)
