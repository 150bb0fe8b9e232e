"""The local cluster's API server restart (llmscale.localcluster.cluster.restart_apiserver): the
command line it starts again, and its refusal without a cluster. The restart itself, with clients
connected, is e2e/test_chaos.py's scenario 17."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmscale.localcluster import cluster


def test_the_command_line_keeps_the_clusters_port_etcd_certificates(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMSCALE_APISERVER_EXTRA_ARGS", "--audit-log-path=/tmp/a.log --v=2")
    argv = cluster.apiserver_argv(tmp_path, Path("/bins"), {"apiserver": 6443, "etcd_client": 2379})
    assert argv[0] == "/bins/kube-apiserver"
    assert "--secure-port=6443" in argv and "--etcd-servers=http://127.0.0.1:2379" in argv
    assert f"--tls-cert-file={tmp_path / 'pki' / 'apiserver.crt'}" in argv
    assert argv[-2:] == ["--audit-log-path=/tmp/a.log", "--v=2"]


def test_without_a_cluster_it_refuses_naming_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=cluster.APISERVER_ARGV):
        cluster.restart_apiserver(tmp_path)
    assert not (tmp_path / "pids").exists(), "nothing was started or stopped"


def test_the_saved_command_line_is_owned_by_up() -> None:
    # A fresh `up` removes it with the rest of the state it owns, so a restart never uses an old one.
    assert cluster.APISERVER_ARGV in cluster.OWNED
