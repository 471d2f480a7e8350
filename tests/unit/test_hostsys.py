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


def test_kill_until_gone_kills_real_processes_and_reaps_between_rounds():
    import subprocess
    procs = [subprocess.Popen(["sleep", "100"]) for _ in range(3)]
    rounds = []
    left = hostsys.kill_until_gone(lambda: [p.pid for p in procs if p.poll() is None],
                                   between=lambda: rounds.append(len(rounds)))
    assert left == [] and rounds and all(p.returncode == -9 for p in procs)


def test_kill_until_gone_names_what_it_could_not_kill(caplog):
    left = hostsys.kill_until_gone(lambda: [2**22 + 7], timeout=0.2)  # above pid_max: never exists
    assert left == [2**22 + 7]
    assert "processes 4194311 still there after 0.2s" in caplog.text
