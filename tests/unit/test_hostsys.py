"""What real nodes change on the host is recorded and undone (here on a temporary tree)."""

from __future__ import annotations

from draconf.testbed import hostsys


def test_mountpoints_the_bed_created_are_removed_and_others_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(hostsys, "CREATED_DIRS_RECORD", tmp_path / "record")
    existing = tmp_path / "var" / "lib"
    existing.mkdir(parents=True)
    hostsys.make_mountpoint(str(existing / "kubelet"))
    hostsys.make_mountpoint(str(tmp_path / "run" / "nvidia" / "driver"))
    assert (existing / "kubelet").is_dir() and (tmp_path / "run" / "nvidia" / "driver").is_dir()
    removed = hostsys.remove_created_dirs()
    assert sorted(removed) == sorted(str(p) for p in (existing / "kubelet", tmp_path / "run",
                                                      tmp_path / "run" / "nvidia",
                                                      tmp_path / "run" / "nvidia" / "driver"))
    assert existing.is_dir() and not (tmp_path / "run").exists()
    assert not (tmp_path / "record").exists()


def test_a_mountpoint_that_is_not_empty_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(hostsys, "CREATED_DIRS_RECORD", tmp_path / "record")
    hostsys.make_mountpoint(str(tmp_path / "kubelet"))
    (tmp_path / "kubelet" / "someone-elses").write_text("x")
    assert hostsys.remove_created_dirs() == [] and (tmp_path / "kubelet" / "someone-elses").exists()
