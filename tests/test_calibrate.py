"""The α-β fit and the size parser of ``spgnn calibrate`` (no processes needed)."""

import numpy as np
import pytest

from spgnn.comm.calibrate import fit_alpha_beta, parse_ops, parse_sizes
from spgnn.errors import SpgnnError


def test_fit_recovers_alpha_and_beta():
    x = 4.0 ** np.arange(6, 14)
    alpha, beta = 20e-6, 1 / 3e9
    a, b, err = fit_alpha_beta(x, alpha + beta * x)
    assert a == pytest.approx(alpha, rel=1e-6) and b == pytest.approx(beta, rel=1e-6) and err < 1e-9
    a, b, _ = fit_alpha_beta(x, np.full_like(x, 1e-3))          # flat: all latency, no negative β
    assert a == pytest.approx(1e-3) and b == 0


def test_a_fit_of_free_bytes_or_a_poor_one_is_doubted():
    """calibrate wrote β = 0 (bytes free to every later prediction) and fits 70% off without a word."""
    from spgnn.comm.calibrate import doubts

    def result(beta, err):
        return {"collectives": {"all_reduce": {"beta_s_per_byte": beta, "rms_relative_error": err}}}

    assert doubts(result(1e-9, 0.05)) == []
    assert [d.split(":")[0] for d in doubts(result(0.0, 0.7))] == ["all_reduce", "all_reduce"]
    assert "β = 0" in doubts(result(0.0, 0.05))[0] and "70%" in doubts(result(1e-9, 0.7))[0]


def test_parse_sizes_and_ops():
    assert parse_sizes("4K, 1M,64MB,100") == [4096, 1 << 20, 64 << 20, 100]
    assert parse_ops("all_reduce,broadcast") == ["all_reduce", "broadcast"]
    for bad in ("0", "4X", "", "1M,,2M"):
        with pytest.raises(SpgnnError):
            parse_sizes(bad)
    with pytest.raises(SpgnnError, match="allreduce"):
        parse_ops("allreduce")


def test_a_process_alone_that_overruns_is_a_clear_error(monkeypatch):
    """Timing the kernels in a process alone is bounded: past ALONE_TIMEOUT_S it is one SpgnnError, not a rank
    that keeps the others waiting."""
    from spgnn.comm import calibrate

    monkeypatch.setattr(calibrate, "ALONE_TIMEOUT_S", 0.01)
    with pytest.raises(SpgnnError, match="took over 0.01 s"):
        calibrate.alone_rates(1, scale=8, degree=2, f=8)


def test_one_message_size_fits_no_latency(tmp_path, capsys):
    """--sizes 64K fitted α = 0 with 'rms error 0.00', and the file was taken as a calibration."""
    import json

    from spgnn.cli import main
    from spgnn.cost import load_calibration

    assert main(["calibrate", "--nprocs", "2", "--sizes", "64K,64K", "--output", str(tmp_path / "c.json")]) == 2
    assert "give at least two distinct message sizes" in capsys.readouterr().err
    one = {"world_size": 2, "collectives": {"broadcast": {"alpha_s": 0.0, "beta_s_per_byte": 1e-9, "messages": 1,
                                                          "points": [{"bytes": 65536, "seconds": 7e-5}]}}}
    (tmp_path / "one.json").write_text(json.dumps(one))
    with pytest.raises(SpgnnError, match="broadcast was timed at one message size"):
        load_calibration(tmp_path / "one.json")


@pytest.mark.parametrize("change, needle", [
    (lambda d: d.pop("world_size"), "is not a calibration spgnn reads (KeyError: 'world_size')"),
    (lambda d: d["compute"].update(gpu_flops=1.0), "is not a calibration spgnn reads (TypeError"),
    (lambda d: d["compute"].update(flops_per_s=0), "flops_per_s 0 is no figure a machine could have"),
    (lambda d: d.update(cores=0), "cores 0 is no figure a machine could have"),
    (lambda d: d["collectives"]["broadcast"].update(beta_s_per_byte=-1), "broadcast's α 0.0001 and β -1 must be"),
    (lambda d: d["collectives"]["broadcast"].update(beta_s_per_byte=float("inf")), "and β inf must be finite"),
    (lambda d: d["collectives"]["broadcast"].update(alpha_s=True), "broadcast's α True and β"),
    (lambda d: d["compute"].update(flops_per_s=float("inf")), "flops_per_s inf is no figure a machine could have"),
    (lambda d: d.update(schema="spgnn.calibration/99"), "of schema 'spgnn.calibration/99', which this spgnn does "
                                                        "not read"),
    # a null rate passed as "not measured" and was divided by after the last epoch (TypeError, no report)
    (lambda d: d["compute"].update(flops_per_s=None), "flops_per_s None is no figure a machine could have"),
    (lambda d: d["compute"].update(spmm_ordered_bytes_per_s=None), "spmm_ordered_bytes_per_s None is no figure"),
    (lambda d: d["compute"].update(alone={"op_s": None}), "alone's op_s None is no figure"),
    (lambda d: d.update(cores=1.5), "cores 1.5 is no figure a machine could have"),
    (lambda d: d["collectives"]["broadcast"].update(messages=float("inf")), "broadcast's messages inf must be"),
    (lambda d: d.update(world_size=float("inf")), "is not a calibration spgnn reads (OverflowError"),
    (lambda d: d["collectives"].update(gather=d["collectives"]["broadcast"]), "collective 'gather' is none"),
])
def test_a_calibration_no_run_can_use_is_refused_before_any_work(change, needle, tmp_path, capsys):
    """Each passed the start's check and ended the run after its last epoch (KeyError, TypeError,
    ZeroDivisionError), its report lost, or spgnn cost's in a traceback; a negative β predicted −198151 s an
    epoch."""
    import json

    from spgnn.cli import main
    from spgnn.cost import DEFAULT_RATES

    good = {"world_size": 2, "cores": 2, "collectives": {"broadcast": {"alpha_s": 1e-4, "beta_s_per_byte": 1e-9,
                                                                       "messages": 1}},
            "compute": {k: v for k, v in vars(DEFAULT_RATES).items() if k not in ("cores", "comm_ranks", "alone")}}
    change(good)
    (tmp_path / "c.json").write_text(json.dumps(good))
    for command in (["train", "--dataset", "sbm:60:3", "--epochs", "1", "--quiet"], ["cost", "--nprocs", "2"]):
        assert main([*command, "--calibration", str(tmp_path / "c.json")]) == 2
        (err,) = capsys.readouterr().err.strip().splitlines()
        assert needle in err and not ("calibrate again" in err and "give --calibration a file" in err)   # one remedy


def test_rates_a_calibration_may_leave_null_are_read():
    """Of the rates only the rcm-order SpMM's pair (both, as files before schema 4 lack them) and the rates of a
    process alone (before schema 6) may be null: they fall back to the SpMM's own rates and the shared ones."""
    import json
    import tempfile

    from spgnn.cost import DEFAULT_RATES, load_rates

    compute = {k: v for k, v in vars(DEFAULT_RATES).items() if k not in ("cores", "comm_ranks", "alone")}
    compute |= {"spmm_ordered_nnz_s": None, "spmm_ordered_bytes_per_s": None, "alone": None}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump({"world_size": 2, "cores": 2.0, "collectives": {}, "compute": compute}, f)
        f.flush()
        rates = load_rates(f.name)
    assert rates.spmm_ordered_nnz_s is None and rates.alone is None and rates.cores == 2
    assert rates.spmm_s(10, 400, ordered=True) == rates.spmm_s(10, 400)


@pytest.mark.parametrize("text, needle", [
    (None, "cannot read the calibration {path} (No such file or directory): give a file written by spgnn calibrate"),
    ("[1]", "{path} is not a calibration spgnn reads (JSON list, not an object): give a file written by spgnn"),
    ("nope", "cannot read the calibration {path} (JSONDecodeError: Expecting value"),
])
def test_a_file_that_is_no_calibration_is_one_line_with_one_remedy(text, needle, tmp_path, capsys):
    """The loaders say what is wrong and what to do themselves: the command line added its remedy where their
    message lacked the word "calibrate", and a JSON list was "AttributeError: 'list' object has no attribute
    'get'"."""
    from spgnn.cli import main

    path = tmp_path / "c.json"
    if text is not None:
        path.write_text(text)
    for command in (["train", "--dataset", "sbm:60:3", "--epochs", "1", "--quiet"], ["cost", "--nprocs", "2"]):
        assert main([*command, "--calibration", str(path)]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"spgnn: error: {needle.format(path=path)}") and line.count("give") == 1, line


def test_calibrate_refuses_what_train_refuses(capfd):
    """--device bogus started both ranks and failed in their collectives; --timeout 0 was blamed on the network,
    1e13 (which train refuses) an OverflowError in both ranks; --sizes 1,2 are one message size once rounded to words,
    which fitted α = 0 and 1/β = 0 GB/s."""
    from spgnn.cli import main

    for args, needle in ((["--device", "bogus"], "--device must be cpu or cuda[:N], got 'bogus'"),
                         (["--timeout", "0"], "--timeout must be a number of seconds of at least 1 and at most"),
                         (["--timeout", "1e13"], "--timeout must be a number of seconds of at least 1 and at most "
                                                 "2592000 (how long"),      # an OverflowError in every rank
                         (["--budget", "nan"], "--budget must be a positive number of seconds"),
                         (["--sizes", "1,2"], "--sizes 1, 2 bytes are one message size on 2 processes"),
                         (["--output", "/proc/x.json"], "cannot write the fits to /proc/x.json")):   # ("the report")
        assert main(["calibrate", "--nprocs", "2", "--sizes", "4K,64K", *args]) == 2
        assert needle in capfd.readouterr().err                     # the processes' own stderr too


def test_sizes_beyond_the_memory_are_refused_before_any_process(monkeypatch, capfd):
    """--sizes 4K,99999999999G was a traceback in both ranks, 4K,64G an out-of-memory message that advised
    spgnn cost --memory-per-rank: what the largest size's buffers need (every local rank holds its message and an
    all-gather's P of them) is checked against the machine's memory first."""
    from spgnn.cli import main
    from spgnn.comm import calibrate
    from spgnn.comm.calibrate import buffer_bytes

    assert buffer_bytes([4096, 1 << 20], 2, ["all_gather"], 2) == 2 * 3 * (1 << 20)
    assert buffer_bytes([4096, 1 << 20], 4, ["broadcast"], 1) == 2 * (1 << 20)
    for sizes, memory_bytes in (("4K,99999999999G", None), ("4K,64M", 256 << 20)):
        if memory_bytes:
            monkeypatch.setattr(calibrate, "physical_memory_bytes", lambda have=memory_bytes: have)
        assert main(["calibrate", "--nprocs", "2", "--sizes", sizes]) == 2
        (line,) = capfd.readouterr().err.strip().splitlines()
        assert line.startswith(f"spgnn: error: --sizes {sizes}: ") and "give smaller --sizes" in line, line
