"""The Kubernetes and node-problem-detector recipes, as far as they run without a cluster: the
manifests parse and carry what the API server and the engines require, the node script labels
and taints through kubectl (a recording fake), and the NPD plugin honours its exit-code contract."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO_ROOT
from tests.deploy_fakes import fake_kubectl, fake_preflight, kubectl_calls
from tests.fleet_reports import ddp_check, hung_ddp, make_report, slow_p2p

K8S = REPO_ROOT / "deploy" / "kubernetes"
NPD = REPO_ROOT / "deploy" / "npd"
NODE_SCRIPT = K8S / "preflight-node.sh"
NPD_SCRIPT = NPD / "preflight-npd.sh"
DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def documents(name: str, **placeholders: str) -> list[dict[str, Any]]:
    text = (K8S / name).read_text()
    for key, value in placeholders.items():
        text = text.replace(f"__{key}__", value)
    return [doc for doc in yaml.safe_load_all(text) if doc]


def by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {doc["kind"]: doc for doc in docs}


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {item["name"]: item for item in container.get("env", [])}


# -- manifests ------------------------------------------------------------------------------------


def test_every_manifest_has_api_version_kind_and_a_valid_name() -> None:
    for path in K8S.glob("*.yaml"):
        for doc in documents(path.name, NODE="gpu-node-1", GPUS="8"):
            assert doc.get("apiVersion") and doc.get("kind"), path
            if doc["kind"] != "Kustomization":
                assert DNS_1123.match(doc["metadata"]["name"]), (path, doc["metadata"]["name"])


def test_rbac_lets_the_service_account_get_and_patch_nodes() -> None:
    rbac = by_kind(documents("rbac.yaml"))
    account = rbac["ServiceAccount"]["metadata"]
    rule = rbac["ClusterRole"]["rules"][0]
    assert rule["apiGroups"] == [""] and rule["resources"] == ["nodes"] and {"get", "patch"} <= set(rule["verbs"])
    binding = rbac["ClusterRoleBinding"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": rbac["ClusterRole"]["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["name"], "namespace": account["namespace"]}]
    assert rbac["Namespace"]["metadata"]["name"] == account["namespace"]


def pod_checks(pod: dict[str, Any], runner: dict[str, Any]) -> None:
    """What both the Job and the DaemonSet pod need to run preflight-node.sh."""
    account = by_kind(documents("rbac.yaml"))["ServiceAccount"]["metadata"]["name"]
    assert pod["serviceAccountName"] == account
    assert runner["command"] == ["/bin/sh", "/opt/preflight/preflight-node.sh"]
    assert env_of(runner)["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    mounts = {m["name"]: m["mountPath"] for m in runner["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["script"] == "/opt/preflight" and volumes["script"]["configMap"]["name"] == configmap_name()
    assert volumes["reports"]["hostPath"]["path"] == mounts["reports"] == env_of(runner)["PREFLIGHT_REPORT_DIR"]["value"]
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory" and mounts["dshm"] == "/dev/shm"
    tolerated = {t["key"] for t in pod["tolerations"]}
    assert {"preflight/not-ready", "preflight/pending"} <= tolerated  # it must run again on a node it tainted


def configmap_name() -> str:
    kustomization = documents("kustomization.yaml")[0]
    (generator,) = kustomization["configMapGenerator"]
    assert generator["files"] == ["preflight-node.sh"] and kustomization["generatorOptions"]["disableNameSuffixHash"]
    return str(generator["name"])


def test_the_kustomization_lists_files_that_exist() -> None:
    kustomization = documents("kustomization.yaml")[0]
    for name in kustomization["resources"] + kustomization["configMapGenerator"][0]["files"]:
        assert (K8S / name).is_file(), name


def test_the_job_runs_once_on_the_named_node_with_all_its_gpus() -> None:
    (job,) = documents("job.yaml", NODE="gpu-node-1", GPUS="8")
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job" and job["metadata"]["name"] == "preflight-gpu-node-1"
    spec = job["spec"]
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] > 0
    pod = spec["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "gpu-node-1"}
    (runner,) = pod["containers"]
    assert runner["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert env_of(runner)["PREFLIGHT_ARGS"]["value"] == "--expect-gpus 8"
    pod_checks(pod, runner)
    assert "__" not in json.dumps(job)


def test_the_daemonset_gates_every_gpu_node_without_holding_its_gpus() -> None:
    (ds,) = documents("daemonset.yaml")
    assert ds["apiVersion"] == "apps/v1" and ds["kind"] == "DaemonSet"
    template = ds["spec"]["template"]
    labels = template["metadata"]["labels"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= labels.items()  # the API server rejects it otherwise
    pod = template["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    (runner,) = pod["initContainers"]
    pod_checks(pod, runner)
    assert env_of(runner)["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env_of(runner)["PREFLIGHT_GATE_TAINT"]["value"] == "preflight/pending:NoSchedule"
    for container in pod["initContainers"] + pod["containers"]:
        assert "nvidia.com/gpu" not in json.dumps(container.get("resources", {}))
    (hold,) = pod["containers"]
    assert "sleep" in " ".join(hold["command"])


# -- the node script ------------------------------------------------------------------------------


def run_node_script(tmp_path: Path, report: dict[str, Any] | None, code: int, gate: str | None = None) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = {**os.environ, "NODE_NAME": "gpu-node-1", "PREFLIGHT": str(fake_preflight(bin_dir, report, code)),
           "KUBECTL": str(fake_kubectl(bin_dir)), "PREFLIGHT_REPORT_DIR": str(tmp_path / "out")}
    if gate:
        env["PREFLIGHT_GATE_TAINT"] = gate
    return subprocess.run(["sh", str(NODE_SCRIPT)], capture_output=True, text=True, env=env, timeout=60)


def assert_valid_kubectl(calls: list[list[str]]) -> None:
    """Every label and taint value is one Kubernetes accepts."""
    for call in calls:
        for arg in call[3:]:
            if "=" in arg and not arg.startswith("--"):
                value = arg.split("=", 1)[1].split(":", 1)[0]
                assert LABEL_VALUE.match(value) and len(value) <= 63, arg


def test_a_ready_node_is_labelled_and_its_taints_removed(tmp_path: Path) -> None:
    result = run_node_script(tmp_path, make_report("n", [ddp_check()]), 0, gate="preflight/pending:NoSchedule")
    assert result.returncode == 0, result.stderr
    calls = kubectl_calls(tmp_path / "bin")
    assert calls == [
        ["label", "node", "gpu-node-1", "--overwrite", "preflight/verdict=READY", "preflight/code="],
        ["taint", "node", "gpu-node-1", "preflight/not-ready:NoSchedule-"],
        ["taint", "node", "gpu-node-1", "preflight/pending:NoSchedule-"],
    ]
    assert (tmp_path / "out" / "status").read_text() == "0 READY\n"
    argv = (tmp_path / "bin" / "preflight.argv").read_text()
    assert "--profile quick --oneline" in argv and f"--prometheus {tmp_path / 'out' / 'preflight.prom'}" in argv


def test_a_degraded_node_is_labelled_with_its_warning_and_not_tainted(tmp_path: Path) -> None:
    assert run_node_script(tmp_path, make_report("n", [ddp_check(), slow_p2p()]), 0).returncode == 0
    calls = kubectl_calls(tmp_path / "bin")
    assert calls[0] == ["label", "node", "gpu-node-1", "--overwrite", "preflight/verdict=DEGRADED",
                        "preflight/code=NCCL_P2P_SLOW"]
    assert not any(c[0] == "taint" and not c[-1].endswith("-") for c in calls)
    assert_valid_kubectl(calls)


def test_a_node_that_is_not_ready_is_tainted_with_the_failing_code(tmp_path: Path) -> None:
    result = run_node_script(tmp_path, make_report("n", [hung_ddp(), slow_p2p()]), 1, gate="preflight/pending:NoSchedule")
    assert result.returncode == 1
    calls = kubectl_calls(tmp_path / "bin")
    assert calls == [
        ["label", "node", "gpu-node-1", "--overwrite", "preflight/verdict=NOT_READY", "preflight/code=DDP_RANK_HUNG"],
        ["taint", "node", "gpu-node-1", "--overwrite", "preflight/not-ready=DDP_RANK_HUNG:NoSchedule"],
    ]  # the gate taint stays: the node is not accepted
    assert_valid_kubectl(calls)
    assert (tmp_path / "out" / "status").read_text().startswith("1 NOT READY: DDP_RANK_HUNG (+1 more) - ")
    assert "preflight on gpu-node-1: NOT READY: DDP_RANK_HUNG" in result.stdout


def test_a_run_that_could_not_decide_is_labelled_unknown_and_not_tainted(tmp_path: Path) -> None:
    result = run_node_script(tmp_path, None, 2)
    assert result.returncode == 2
    assert kubectl_calls(tmp_path / "bin") == [["label", "node", "gpu-node-1", "--overwrite", "preflight/verdict=UNKNOWN",
                                                "preflight/code="]]
    assert (tmp_path / "out" / "status").read_text() == "2 UNKNOWN: preflight could not run (exit 2)\n"


def test_the_node_script_refuses_to_run_without_its_node_name(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    result = subprocess.run(["sh", str(NODE_SCRIPT)], capture_output=True, text=True, env=env, timeout=30)
    assert result.returncode != 0 and "NODE_NAME must be set" in result.stderr


# -- node-problem-detector ------------------------------------------------------------------------


def seconds(duration: str) -> float:
    match = re.fullmatch(r"(\d+)(s|m)", duration)
    assert match, duration
    return int(match[1]) * (60 if match[2] == "m" else 1)


def test_the_npd_config_is_a_valid_custom_plugin_monitor() -> None:
    config = json.loads((NPD / "preflight-monitor.json").read_text())
    assert config["plugin"] == "custom" and config["source"]
    plugin = config["pluginConfig"]
    assert plugin["max_output_length"] == 80 and seconds(plugin["invoke_interval"]) >= seconds(plugin["timeout"])
    conditions = {c["type"]: c for c in config["conditions"]}
    for rule in config["rules"]:
        assert rule["type"] in ("permanent", "temporary") and re.fullmatch(r"[A-Z][A-Za-z]+", rule["reason"])
        assert seconds(rule["timeout"]) <= seconds(plugin["timeout"])  # NPD refuses a rule timeout above the plugin's
        assert os.path.basename(rule["path"]) == NPD_SCRIPT.name
        if rule["type"] == "permanent":
            assert rule["condition"] in conditions and conditions[rule["condition"]]["reason"] != rule["reason"]


def npd(status_text: str | None, tmp_path: Path, age_s: float = 0, max_age: str | None = None) -> subprocess.CompletedProcess[str]:
    status = tmp_path / "status"
    if status_text is not None:
        status.write_text(status_text)
        then = time.time() - age_s
        os.utime(status, (then, then))
    env = {**os.environ, "PREFLIGHT_STATUS_FILE": str(status)}
    if max_age:
        env["PREFLIGHT_MAX_AGE_S"] = max_age
    started = time.monotonic()
    result = subprocess.run(["sh", str(NPD_SCRIPT)], capture_output=True, text=True, env=env, timeout=30)
    assert time.monotonic() - started < 3  # well inside the rule's timeout
    return result


@pytest.mark.parametrize(("status", "code", "message"), [
    ("0 READY\n", 0, "READY"),
    ("0 DEGRADED: NCCL_P2P_SLOW - P2P bandwidth gpu0-gpu1 is 12 GB/s\n", 0, "DEGRADED: NCCL_P2P_SLOW - P2P bandwidth"),
    ("1 NOT READY: GPU_LOST - GPU 3 fell off the bus\n", 1, "NOT READY: GPU_LOST - GPU 3 fell off the bus"),
    ("2 UNKNOWN: preflight could not run (exit 2)\n", 2, "UNKNOWN: preflight could not run"),
    ("garbage\n", 2, "preflight status unreadable"),
    ("", 2, "preflight status unreadable"),
])
def test_the_npd_plugin_maps_the_last_result_to_its_exit_codes(tmp_path: Path, status: str, code: int, message: str) -> None:
    result = npd(status, tmp_path)
    assert result.returncode == code
    assert result.stdout.startswith(message) and len(result.stdout.rstrip("\n")) <= 80


def test_the_npd_plugin_says_unknown_when_preflight_never_ran(tmp_path: Path) -> None:
    result = npd(None, tmp_path)
    assert result.returncode == 2 and result.stdout.startswith("preflight has not run on this node")


def test_the_npd_plugin_says_unknown_for_a_stale_result(tmp_path: Path) -> None:
    result = npd("0 READY\n", tmp_path, age_s=7200, max_age="3600")
    assert result.returncode == 2 and result.stdout.startswith("preflight result is stale (")


def test_the_npd_plugin_cuts_its_message_at_80_characters(tmp_path: Path) -> None:
    result = npd("1 NOT READY: X_" + "Y" * 200 + "\n", tmp_path)
    assert result.returncode == 1 and len(result.stdout.rstrip("\n")) == 80


def test_the_node_script_and_the_npd_plugin_agree(tmp_path: Path) -> None:
    run_node_script(tmp_path, make_report("n", [hung_ddp()]), 1)
    result = npd(None, tmp_path / "out")
    assert result.returncode == 1 and result.stdout.startswith("NOT READY: DDP_RANK_HUNG - ddp: rank 3 hung")
