"""Launchers: a real multi-process Ray cluster (a head and a second node started with ``ray start``, CPU only,
token authentication on as Ray 2.60 turns it on), ``ray job submit --working-dir``, and the check that the
cluster answers and lets the driver in before any point starts.

The cluster's processes run in their own process groups and are ended by group id (never ``ray stop``,
which ends every Ray process of the machine); the test fails if any process of its temp dir is left.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import pytest
import yaml

ray = pytest.importorskip("ray")

from conftest import REPO, tiny_config  # noqa: E402
from monkeybarrel.orchestrator.store.experiment_store import ExperimentStore  # noqa: E402
from monkeybarrel.orchestrator.sweep.cluster import ClusterError, auth_token, check_cluster  # noqa: E402
from monkeybarrel.sandbox.cgroups import running  # noqa: E402

BIN = Path(sys.executable).parent
UNROUTABLE = "10.255.255.1"
"""A reserved address nothing answers on."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- the check, without a cluster ------------------------------------------------------------

def test_no_cluster_at_the_address_is_one_line_within_the_deadline():
    began = time.monotonic()
    with pytest.raises(ClusterError) as caught:
        check_cluster(f"127.0.0.1:{free_port()}", timeout_s=5)
    message = str(caught.value)
    assert "no Ray cluster answers" in message and "ray start --head" in message and "\n" not in message
    assert time.monotonic() - began < 10


@pytest.mark.parametrize("address, words", [
    ("http://127.0.0.1:8265", "dashboard (job submission) address"),
    (f"ray://127.0.0.1:{free_port()}", "Ray client server"),
    ("not a host:port:at all", "Ray cluster 'not a host:port:at all'"),
])
def test_other_addresses_that_cannot_work_say_why(address, words):
    with pytest.raises(ClusterError, match=re.escape(words)):
        check_cluster(address, timeout_s=3)


def test_without_grpcio_the_check_says_the_cluster_answers_and_that_auth_was_not_checked(monkeypatch):
    """Ray's core wheel alone (as on the GPU machine's bundle) has no grpcio: fall back to a TCP connect."""
    monkeypatch.setitem(sys.modules, "grpc", None)  # `import grpc` raises ImportError
    with socket.socket() as server:
        server.bind(("0.0.0.0", 0))  # Ray resolves 127.0.0.1 to this machine's address
        server.listen()
        line = check_cluster(f"127.0.0.1:{server.getsockname()[1]}", timeout_s=3)
    assert "answers" in line and "authentication not checked: grpcio is missing" in line
    with pytest.raises(ClusterError, match="no answer"):
        check_cluster(f"127.0.0.1:{free_port()}", timeout_s=3)


def test_the_token_sent_is_the_one_ray_init_would_send(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    assert auth_token("10.0.0.1:6379") == (None, "RAY_AUTH_MODE is not token and no token is here")
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("home-token\n")
    token, why = auth_token("10.0.0.1:6379")  # an explicit address: Ray sends it only with RAY_AUTH_MODE=token
    assert token is None and "a token is at" in why and "auth_token" in why
    assert auth_token("auto") == ("home-token", str(tmp_path / ".ray" / "auth_token"))
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "other"))
    (tmp_path / "other").write_text("path-token")
    assert auth_token("10.0.0.1:6379") == ("path-token", str(tmp_path / "other"))
    monkeypatch.setenv("RAY_AUTH_TOKEN", "env-token")
    assert auth_token("10.0.0.1:6379") == ("env-token", "$RAY_AUTH_TOKEN")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert auth_token("auto") == (None, "RAY_AUTH_MODE=disabled")


# ---- a real cluster: a head and a second node --------------------------------------------------

class Cluster:
    """``ray start --head`` and ``ray start --address`` as two process groups on this machine, token auth on."""

    def __init__(self) -> None:
        self.temp = Path(tempfile.mkdtemp(prefix="mbray", dir="/tmp"))  # short: Ray's socket paths must fit
        self.token = secrets.token_hex(32)
        self.port, self.dashboard = free_port(), free_port()
        self.address, self.dashboard_url = f"127.0.0.1:{self.port}", f"http://127.0.0.1:{self.dashboard}"
        self.env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token, "HOME": str(self.temp),
                    "PATH": f"{BIN}:{os.environ.get('PATH', '')}", "RAY_USAGE_STATS_ENABLED": "0",
                    "PYTHONUNBUFFERED": "1"}
        self.env.pop("RAY_ADDRESS", None)
        self.groups: list[subprocess.Popen] = []

    def _start(self, *args: str) -> None:
        agent = ["--dashboard-agent-listen-port", str(free_port()), "--dashboard-agent-grpc-port", str(free_port()),
                 "--metrics-export-port", str(free_port()), "--runtime-env-agent-port", str(free_port())]
        log = open(self.temp / f"start-{len(self.groups)}.log", "w")
        self.groups.append(subprocess.Popen(
            [str(BIN / "ray"), "start", *args, "--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--num-gpus", "0",
             "--object-store-memory", str(100 * 2**20), "--disable-usage-stats", "--block", *agent],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    def start(self) -> "Cluster":
        self._start("--head", "--port", str(self.port), "--temp-dir", str(self.temp / "ray"),
                    "--dashboard-host", "127.0.0.1", "--dashboard-port", str(self.dashboard),
                    "--ray-client-server-port", str(free_port()))
        self.wait(1)
        self._start("--address", self.address)
        self.wait(2)
        return self

    def wait(self, nodes: int, timeout_s: float = 120) -> str:
        """Wait for the nodes as a launcher does (deploy/slurm/ray_cluster.sbatch): ``python -m ...cluster``."""
        done = subprocess.run([sys.executable, "-m", "monkeybarrel.orchestrator.sweep.cluster", self.address,
                               "--nodes", str(nodes), "--timeout", str(timeout_s)], env=self.env, capture_output=True,
                              text=True, timeout=timeout_s + 60)
        if done.returncode != 0:
            logs = "\n".join(p.read_text()[-2000:] for p in sorted(self.temp.glob("start-*.log")))
            raise RuntimeError(f"the Ray cluster did not come up with {nodes} node(s): {done.stderr}\n{logs}")
        assert f"{nodes} node" in done.stdout and "token from $RAY_AUTH_TOKEN" in done.stdout
        return done.stdout

    def leftovers(self) -> list[int]:
        """Processes (other than this one) whose command line names the cluster's temp dir or its groups."""
        groups = {p.pid for p in self.groups}
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
                pgid = os.getpgid(int(entry.name))
            except (OSError, ProcessLookupError):
                continue
            if (str(self.temp) in cmdline or pgid in groups) and running(int(entry.name)):  # a zombie has ended
                found.append(int(entry.name))
        return found

    def stop(self) -> list[int]:
        """End both process groups (TERM, then KILL); returns what was still there after TERM's grace."""
        for group in self.groups:
            try:
                os.killpg(group.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.leftovers():
            time.sleep(0.5)
        stubborn = self.leftovers()
        for group in self.groups:
            try:
                os.killpg(group.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            group.wait(timeout=30)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and self.leftovers():
            for pid in self.leftovers():  # ours by their temp dir or group
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.5)
        shutil.rmtree(self.temp, ignore_errors=True)
        return stubborn


@pytest.fixture(scope="module")
def cluster():
    started = Cluster()
    try:
        yield started.start()
    finally:
        started.stop()
    assert not started.leftovers()


def sweep_dir(tmp_path: Path, workers: int = 2) -> Path:
    base = tiny_config(name="base", problems=2, samples=2, max_tokens=8)
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "sweep.yaml").write_text(yaml.safe_dump({
        "name": "on-a-cluster", "base": base, "axes": {"generators[0].temperature": [0.3]},
        "ray": {"num_workers": workers, "requests_per_task": 1}, "retry": {"attempts": 1}}, sort_keys=False))
    return folder


def driver(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "monkeybarrel"), *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("auth, words", [
    ({}, "uses token authentication and this driver sends no token"),
    ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64}, "refused this driver's token (from $RAY_AUTH_TOKEN)"),
])
def test_a_driver_the_cluster_refuses_gets_one_line_before_any_point_runs(cluster, tmp_path, auth, words):
    folder = sweep_dir(tmp_path)
    env = {k: v for k, v in cluster.env.items() if not k.startswith("RAY_AUTH")}
    env.update(auth, HOME=str(tmp_path))
    began = time.monotonic()
    done = driver(["sweep", "sweep.yaml", "--ray-address", cluster.address, "--out", str(tmp_path / "out")], env, folder)
    assert done.returncode == 2 and time.monotonic() - began < 60
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: Ray cluster ") and words in lines[0], done.stderr
    assert "InvalidAuthToken" not in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()  # nothing was started, nothing created


def test_ray_job_submit_runs_the_sweep_on_both_nodes_and_the_driver_writes_the_stores(cluster, tmp_path):
    folder, out = sweep_dir(tmp_path), tmp_path / "runs" / "grid"
    job = subprocess.run(
        [str(BIN / "ray"), "job", "submit", "--address", cluster.dashboard_url, "--working-dir", str(folder), "--",
         "monkeybarrel", "sweep", "sweep.yaml", "--ray-address", "auto", "--out", str(out), "--no-progress"],
        env=cluster.env, cwd=folder, capture_output=True, text=True, timeout=600)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    checked = [line for line in job.stdout.splitlines() if "ray cluster" in line]
    assert re.search(r"ray cluster [\d.]+:\d+: 2 nodes, 2 CPUs, 0 GPUs \(token from \$RAY_AUTH_TOKEN\)",
                     " ".join(checked)), checked
    assert "InvalidAuthToken" not in job.stdout + job.stderr
    status = yaml.safe_load((out / "sweep.json").read_text())
    assert [p["state"] for p in status["points"]] == ["done"]
    assert status["engines"] == {"smollm2-135m-instruct (ray: embedded)": {"starts": 1, "points": ["temperature=0.3"]}}
    for point in status["points"]:  # two workers of one CPU each: one on each node
        table = ExperimentStore(out / point["name"]).candidates()
        assert table.num_rows == 4 and all(table.column("text").to_pylist())
    assert status["runs"][-1]["host"] == socket.gethostname()
    with mock.patch.dict(os.environ, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": cluster.token}):
        assert "2 nodes" in check_cluster(cluster.address)  # the job's actors are gone; the cluster is as it was


def test_waiting_for_nodes_that_never_come_ends_with_one_line(tmp_path):
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "monkeybarrel.orchestrator.sweep.cluster", f"127.0.0.1:{free_port()}",
                           "--nodes", "2", "--timeout", "4"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and time.monotonic() - began < 30
    assert done.stderr.startswith("error: Ray cluster") and "not 2 live nodes within 4 s" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_the_kuberay_example_runs_the_sweep_on_its_image_with_token_auth_and_shared_storage():
    docs = list(yaml.safe_load_all((REPO / "deploy" / "kuberay" / "rayjob.yaml").read_text()))
    job, claim = docs
    assert (job["kind"], claim["kind"]) == ("RayJob", "PersistentVolumeClaim")
    assert job["spec"]["entrypoint"].split()[:2] == ["monkeybarrel", "sweep"]
    assert "--ray-address auto" in job["spec"]["entrypoint"] and "--out /data/" in job["spec"]["entrypoint"]
    cluster_spec = job["spec"]["rayClusterSpec"]
    assert cluster_spec["authOptions"] == {"mode": "token"} and cluster_spec["rayVersion"].startswith("2.6")
    pods = [cluster_spec["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"]
                                                                  for g in cluster_spec["workerGroupSpecs"]]
    assert len({c["image"] for pod in pods for c in pod["containers"]}) == 1  # one environment everywhere
    for pod in pods:
        assert any(v.get("persistentVolumeClaim", {}).get("claimName") == claim["metadata"]["name"]
                   for v in pod["volumes"])
        assert all(any(m["mountPath"] == "/data" for m in c["volumeMounts"]) for c in pod["containers"])
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    dockerfile = (REPO / "deploy" / "kuberay" / "Dockerfile").read_text()
    assert dockerfile.index("vllm>=0.26") < dockerfile.index("monkeybarrel[vllm,ray]")  # vLLM's torch kept
    for script in ("sweep_array.sbatch", "ray_cluster.sbatch"):
        assert subprocess.run(["bash", "-n", str(REPO / "deploy" / "slurm" / script)]).returncode == 0
