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
