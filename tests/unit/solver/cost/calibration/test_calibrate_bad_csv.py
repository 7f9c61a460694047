"""``shardplan calibrate`` on a malformed points CSV: one line naming the column, row or byte, exit 2,
nothing written (issue 13, acceptance 5). None of these cases reaches the fit, so scipy is not needed."""

from __future__ import annotations

import csv
import io

import pytest

from shardplan.solver.cli import main
from shardplan.solver.cost.calibration import fit

from .test_calibrate import COLUMNS, TINY


def csv_text(rows, columns=COLUMNS):
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def calibrate(tmp_path, capsys, data: bytes):
    points_csv, out = tmp_path / "points.csv", tmp_path / "p.json"
    points_csv.write_bytes(data)
    with pytest.raises(SystemExit) as exit_:
        main(["calibrate", str(points_csv), "--out", str(out), "--gpu", "H100"])
    err = capsys.readouterr().err
    assert not out.exists(), "a refused CSV must write nothing"
    return exit_.value.code, err


def test_a_missing_column_is_named(tmp_path, capsys):
    without_value = [c for c in COLUMNS if c != "value"]
    code, err = calibrate(tmp_path, capsys, csv_text(TINY, without_value).encode())
    assert code == 2 and "missing column value" in err and len(err.splitlines()) == 1


def test_a_short_row_is_named_by_its_line(tmp_path, capsys):
    lines = csv_text(TINY).splitlines()
    lines[3] = ",".join(lines[3].split(",")[:-3])  # the third data row, on line 4, loses three cells
    code, err = calibrate(tmp_path, capsys, ("\n".join(lines) + "\n").encode())
    assert code == 2 and "points row 4" in err and f"the header has {len(COLUMNS)} columns" in err
    assert len(err.splitlines()) == 1


def test_a_row_after_a_cell_spanning_lines_is_named_by_its_own_line(tmp_path, capsys):
    # A quoted note over three lines moves every later row down by two lines; counting records instead of
    # lines named the short row 'points row 3', a line of the note.
    rows = [dict(r) for r in TINY]
    rows[0]["notes"] = "first line\nsecond line\nthird line"
    lines = csv_text(rows).split("\n")  # the note's cell is on lines 2-4, the second data row on line 5
    assert lines[4].startswith(rows[1]["id"] + ",")
    lines[4] = ",".join(lines[4].split(",")[:-3])
    code, err = calibrate(tmp_path, capsys, "\n".join(lines).encode())
    assert code == 2 and "points row 5:" in err and len(err.splitlines()) == 1


def test_bytes_that_are_not_utf8_are_named_by_offset(tmp_path, capsys):
    text = csv_text(TINY).encode()
    at = text.index(b"Llama")
    code, err = calibrate(tmp_path, capsys, text[:at] + b"\xe9" + text[at + 1:])  # Latin-1 é in a model name
    assert code == 2 and "not UTF-8" in err and f"byte {at}" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("encoding, name", [("utf-16", "UTF-16"), ("utf-32", "UTF-32")])
def test_a_utf16_or_utf32_file_is_named_as_such(tmp_path, capsys, encoding, name):
    # Spreadsheet programs offer "Unicode text" exports: say what the file is, not just "byte 0".
    code, err = calibrate(tmp_path, capsys, csv_text(TINY).encode(encoding))
    assert code == 2 and name in err and "UTF-8" in err and len(err.splitlines()) == 1


def test_a_utf8_byte_order_mark_is_read_past(tmp_path, capsys, monkeypatch):
    """A UTF-8 BOM (what spreadsheet programs put before a CSV) is not a problem: it is dropped, so the header's
    first column is still ``id`` and not ``\\ufeffid`` (which would be refused as 'missing column id'). The same
    rows with and without it reach the fit identically."""
    seen = []

    def stop_at_fit(points, *args, **kwargs):
        seen.append(sorted(p.row_id for p in points))
        raise SystemExit(0)

    monkeypatch.setattr(fit, "fit_profile", stop_at_fit)
    plain = csv_text(TINY).encode()
    for data in (plain, b"\xef\xbb\xbf" + plain):
        points_csv = tmp_path / "points.csv"
        points_csv.write_bytes(data)
        with pytest.raises(SystemExit):
            main(["calibrate", str(points_csv), "--out", str(tmp_path / "p.json"), "--gpu", "H100"])
    assert capsys.readouterr().err == ""
    assert seen == [["12", "2", "22", "32"]] * 2


@pytest.mark.parametrize(("column", "text", "reason"), [
    ("value", "5e-324", "outside"),  # made log(predicted / measured) infinite: SciPy's warnings, then "cannot fit"
    ("value", "1e300", "outside"),
    ("request_rate_qps", "nan", "not a rate"),  # made every residual NaN
    ("request_rate_qps", "0", "not a rate"),  # 0, a negative or -inf rate went into the fit unnoticed
    ("request_rate_qps", "-1", "not a rate"),
    ("request_rate_qps", "-inf", "not a rate"),
])
def test_a_measured_number_out_of_range_is_named_by_its_row(tmp_path, capsys, column, text, reason):
    rows = [dict(r) for r in TINY]
    rows[1][column] = text  # the second data row, on line 3
    code, err = calibrate(tmp_path, capsys, csv_text(rows).encode())
    assert code == 2 and err.startswith("shardplan: error: points row 3:") and reason in err
    assert len(err.splitlines()) == 1


OPS_HEADER = "gpu,backend,op,shape_params,dtype,latency_us,source_file,note"
OPS_ROW = "H100-SXM-80GB,TensorRT-LLM,gemm,M=1 N=8192 K=8192,bfloat16,{latency},x.parquet,"


@pytest.mark.parametrize(("ops", "message"), [
    # A NaN, zero or negative kernel time went into the GEMM fit: a profile was written (exit 0), or the fit's
    # ZeroDivisionError was the message.
    (f"{OPS_HEADER}\n{OPS_ROW.format(latency='nan')}\n", "ops row 2: latency_us 'nan' is outside"),
    (f"{OPS_HEADER}\n{OPS_ROW.format(latency='-49.18')}\n", "ops row 2: latency_us '-49.18' is outside"),
    (f"{OPS_HEADER}\n{OPS_ROW.format(latency='0')}\n", "ops row 2: latency_us '0' is outside"),
    (f"{OPS_HEADER}\n{OPS_ROW.format(latency='fast')}\n", "ops row 2: latency_us 'fast' is not a number"),
    (f"{OPS_HEADER}\nH100-SXM-80GB,TensorRT-LLM\n", "ops row 2: its cells do not match"),
    ("gpu,backend\nx,y\n", "missing column op"),  # was the fit's "KeyError: 'op'"
])
def test_an_operator_points_file_is_checked_row_by_row(tmp_path, capsys, ops, message):
    ops_csv = tmp_path / "ops.csv"
    ops_csv.write_text(ops)
    points_csv, out = tmp_path / "points.csv", tmp_path / "p.json"
    points_csv.write_text(csv_text(TINY))
    with pytest.raises(SystemExit) as exit_:
        main(["calibrate", str(points_csv), "--out", str(out), "--gpu", "H100", "--ops", str(ops_csv)])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and message in err and len(err.splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize("column", ["value", "gpu", "notes"])
def test_a_column_named_twice_is_refused_naming_it(tmp_path, capsys, column):
    # A second 'value' column silently replaced the first (the row dicts keep the last cell): the fit ran
    # on it and wrote a profile, exit 0.
    lines = csv_text(TINY).splitlines()
    second = {"value": "999", "gpu": "H200", "notes": "x"}[column]
    lines = [lines[0] + f",{column}"] + [line + f",{second}" for line in lines[1:]]
    code, err = calibrate(tmp_path, capsys, ("\n".join(lines) + "\n").encode())
    assert code == 2 and len(err.splitlines()) == 1
    assert err.strip().endswith(f"points.csv: column '{column}' appears twice in the header")


def test_a_csv_without_a_usable_row_says_why_each_was_skipped(tmp_path, capsys):
    # 'points: no usable rows in points.csv' named neither a row nor a reason.
    rows = [dict(r) for r in TINY[:2]]
    for row in rows:
        row["model"] = "NoSuchModel"
    rows[1]["id"] = "R2"
    code, err = calibrate(tmp_path, capsys, csv_text(rows).encode())
    assert code == 2 and len(err.splitlines()) == 1
    assert "no usable rows in" in err and "2 rows skipped: no-preset 2 (row id " in err and "'NoSuchModel'" in err
    code, err = calibrate(tmp_path, capsys, csv_text([]).encode())
    assert code == 2 and err.rstrip().endswith("the file has no data rows")
