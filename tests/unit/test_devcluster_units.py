"""The dev control plane's state dir rule, without starting anything: a directory the
launcher did not create is never wiped."""

from __future__ import annotations

from pathlib import Path

import pytest

from tidings.cli.devcluster import OWNER_MARKER, ControlPlane, ControlPlaneError


def claim(folder: Path) -> None:
    ControlPlane(state_dir=folder, bin_dir=folder)._claim_state_dir()


def test_a_users_non_empty_dir_is_refused_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "thesis.tex").write_text("years of work")
    (tmp_path / "data").mkdir()
    with pytest.raises(ControlPlaneError, match="not empty and was not created by tidings"):
        claim(tmp_path)
    assert (tmp_path / "thesis.tex").read_text() == "years of work"
    assert (tmp_path / "data").is_dir() and not (tmp_path / OWNER_MARKER).exists()


def test_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(ControlPlaneError, match="is not a directory"):
        claim(tmp_path / "f")
    assert (tmp_path / "f").read_text() == "x"


@pytest.mark.parametrize("make", [lambda p: None, lambda p: p.mkdir()], ids=["new", "empty"])
def test_a_new_or_empty_dir_is_claimed(tmp_path: Path, make: object) -> None:
    folder = tmp_path / "state"
    make(folder)  # type: ignore[operator]
    claim(folder)
    assert [p.name for p in folder.iterdir()] == [OWNER_MARKER]


def test_its_own_dir_is_wiped_for_a_fresh_start(tmp_path: Path) -> None:
    claim(tmp_path)
    (tmp_path / "etcd" / "member").mkdir(parents=True)
    (tmp_path / "etcd" / "member" / "db").write_text("old")
    (tmp_path / "tokens.csv").write_text("old")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "keep").write_text("keep")
    (tmp_path / "link").symlink_to(outside, target_is_directory=True)
    claim(tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == [OWNER_MARKER]
    assert (outside / "keep").read_text() == "keep"  # a symlink is removed, not followed
