"""The isolated child's output as the user sees it: markers cut out, replayed cells folded,
the suspect cell streamed, whatever the reads' boundaries."""

from __future__ import annotations

import pytest

from cudadiag.isolate.output import REPLAY, SHOWN_BYTES, TARGET, ChildOutput, cell_marker

CHILD_STDOUT = (cell_marker(2, REPLAY) + b"setup line\n" * 1204
                + cell_marker(3, REPLAY) + b"no newline at the end"
                + cell_marker(4, REPLAY)
                + cell_marker(5, TARGET) + b"step 0\nstep 1\n")
CHILD_STDERR = (cell_marker(2, REPLAY) + b"a warning\n" + cell_marker(3, REPLAY)
                + cell_marker(4, REPLAY) + cell_marker(5, TARGET) + b"target warning\n")


def _feed(output: ChildOutput, chunk: int) -> None:
    for name, data in (("stdout", CHILD_STDOUT), ("stderr", CHILD_STDERR)):
        for start in range(0, len(data), chunk):
            output.take(name, data[start:start + chunk])
    output.finish()


@pytest.mark.parametrize("chunk", [1, 7, 65536])
def test_replayed_cells_fold_into_one_line_each_and_the_target_streams(capsys, chunk):
    output = ChildOutput()
    _feed(output, chunk)
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [
        "In[2]: 1,205 lines hidden; --show-replay to see them",
        "In[3]: 1 line hidden; --show-replay to see them",
        "step 0",
        "step 1",
    ]
    assert captured.err == "target warning\n"
    assert "\x00" not in output.text("stdout") + output.text("stderr")
    assert output.text("stdout").count("setup line") == 1204
    assert output.text("stdout").endswith("no newline at the endstep 0\nstep 1\n")


def test_show_replay_streams_every_cell_without_markers(capsys):
    _feed(ChildOutput(show_replay=True), 5)
    out = capsys.readouterr().out
    assert out.count("setup line") == 1204 and "hidden" not in out and "\x00" not in out


def test_nothing_is_printed_when_not_streaming_but_everything_is_kept(capsys):
    output = ChildOutput(stream=False)
    _feed(output, 3)
    assert capsys.readouterr() == ("", "")
    assert "step 1" in output.text("stdout")


def test_text_with_nul_bytes_that_is_no_marker_is_shown_as_it_is(capsys):
    output = ChildOutput()
    output.take("stdout", b"a\x00b\x00cudadiag:cel")
    output.take("stdout", b"x\n")
    output.finish()
    assert capsys.readouterr().out == "a\x00b\x00cudadiag:celx\n"


def test_target_output_beyond_the_cap_is_counted_not_shown(capsys):
    output = ChildOutput()
    output.take("stdout", cell_marker(1, REPLAY) + b"r" * (2 * SHOWN_BYTES))
    output.take("stderr", cell_marker(1, REPLAY) + cell_marker(2, TARGET))
    output.take("stdout", cell_marker(2, TARGET) + b"t" * (SHOWN_BYTES + 10))
    output.finish()
    captured = capsys.readouterr()
    fold, target = captured.out.split("\n", 1)
    assert fold == "In[1]: 1 line hidden; --show-replay to see them"
    assert target == "t" * SHOWN_BYTES
    assert ("10 more bytes of output from the isolated run were not shown (only its first "
            "1 MiB is shown live)") in captured.err


def test_device_lines_of_a_hidden_replayed_cell_are_kept(capsys):
    output = ChildOutput()
    line = (b"/pytorch/aten/src/ATen/native/cuda/Loss.cu:250: nll_loss_forward_reduce_cuda_"
            b"kernel_2d: block: [0,0,0], thread: [2,0,0] Assertion `t >= 0 && t < n_classes` "
            b"failed.\n")
    output.take("stderr", cell_marker(3, REPLAY) + line + cell_marker(5, TARGET))
    output.finish()
    assert list(output.device_lines) == [line.decode().strip()]
    assert "Assertion" not in capsys.readouterr().err
