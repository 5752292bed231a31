#!/usr/bin/env python3
"""The SageMaker container contract, checked from inside a local container.

Run as the training entrypoint of a job (ContainerEntrypoint:
["python3", "<this file>"]). The test that starts the job says what it
expects in the environment variable KILN_EXPECT, a JSON object:

  {"job_name": str, "job_arn": str, "runtime": "process" | "bwrap",
   "groups": [{"name": str, "type": str, "hosts": [str, ...]}, ...],
   "channels": {name: {"groups": [str] | null, "mode": str, "distribution": str,
                       "content_type": str | null, "files": {relpath: text}}},
   "hyperparameters": {str: str}, "environment": {str: str},
   "hidden": [host paths the sandbox must not show]}

Every SM_* variable is derived again here the way the training toolkit derives
it (sagemaker_training/environment.py and mapping.py: json.loads of each
hyperparameter with the raw string as fallback; strings raw, None as "",
everything else json.dumps(sort_keys=True, separators=(",", ":"),
ensure_ascii=True)), with Python's own json and repr, and compared with what the
container was given.

On success it writes model/<host>.ok and output/data/<host>.txt, prints
"CONTRACT OK <host>" and exits 0. On the first failed check it writes the
reason to output/failure (as an algorithm should) and exits 3.
"""
import json
import multiprocessing
import os
import socket
import sys

RESERVED = ("sagemaker_program", "sagemaker_submit_directory",
            "sagemaker_enable_cloudwatch_metrics", "sagemaker_region",
            "sagemaker_container_log_level", "sagemaker_job_name", "default_user_module_name",
            "_tuning_objective_metric", "sagemaker_s3_output")
DIST_FLAGS = ("sagemaker_mpi_enabled", "sagemaker_parameter_server_enabled",
              "sagemaker_distributed_dataparallel_enabled", "sagemaker_pytorch_ddp_enabled",
              "sagemaker_pytorch_xla_multi_worker_enabled",
              "sagemaker_multi_worker_mirrored_strategy_enabled",
              "sagemaker_torch_distributed_enabled")


class ContractError(Exception):
    pass


def check(cond, what):
    if not cond:
        raise ContractError(what)


def equal(actual, expected, what):
    check(actual == expected, f"{what}: got {actual!r}, expected {expected!r}")


def dumps(v):
    return json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def env_value(v):
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    return dumps(v)


def decode(v):
    try:
        return json.loads(v)
    except (ValueError, TypeError):
        return v


def user_args(hps):
    out = []
    for k in sorted(hps):
        out.append(("--%s" % k if len(k) > 1 else "-%s" % k) if k else "")
        v = hps[k]
        if hasattr(v, "items"):
            out.append(",".join("%s=%s" % (a, b) for a, b in sorted(v.items())))
        else:
            out.append("" if v is None else str(v))
    return out


def read_json(path):
    check(os.path.isfile(path), f"missing file {path}")
    with open(path) as f:
        return json.load(f)


def main():
    expect = json.loads(os.environ["KILN_EXPECT"])
    env = os.environ
    host = env.get("SM_CURRENT_HOST", "")
    runtime = expect["runtime"]

    # --- Where things are.
    base = env.get("SAGEMAKER_BASE_DIR", "")
    if runtime == "bwrap":
        equal(base, "/opt/ml", "SAGEMAKER_BASE_DIR")
        equal(socket.gethostname(), host, "host name")
        equal(os.getcwd(), "/opt/ml", "working directory")
    else:
        check(base.endswith("/" + host + "/ml"), f"SAGEMAKER_BASE_DIR {base!r} is not the instance tree")
        equal(os.path.realpath(os.getcwd()), os.path.realpath(base), "working directory")
    for d in ("input/config", "input/data", "model", "output", "output/data",
              "output/intermediate", "checkpoints", "code"):
        check(os.path.isdir(os.path.join(base, d)), f"missing directory {d}")
    check(not os.path.exists(os.path.join(base, "output", "failure")), "a stale failure file")
    check(os.listdir(os.path.join(base, "model")) == [], "model/ is not empty at the start")
    check(os.listdir(os.path.join(base, "output", "data")) == [], "output/data/ is not empty")

    # --- Platform variables and the job's Environment map.
    equal(env.get("TRAINING_JOB_NAME"), expect["job_name"], "TRAINING_JOB_NAME")
    equal(env.get("TRAINING_JOB_ARN"), expect["job_arn"], "TRAINING_JOB_ARN")
    for k, v in expect.get("environment", {}).items():
        equal(env.get(k), v, f"Environment[{k}]")

    # --- hyperparameters.json: the map verbatim, every value a string.
    cfg = os.path.join(base, "input", "config")
    raw_hps = read_json(os.path.join(cfg, "hyperparameters.json"))
    equal(raw_hps, expect["hyperparameters"], "hyperparameters.json")
    check(all(isinstance(v, str) for v in raw_hps.values()), "a hyperparameter is not a string")

    # --- resourceconfig.json
    groups = expect["groups"]
    all_hosts = sorted(h for g in groups for h in g["hosts"])
    mine = [g for g in groups if host in g["hosts"]]
    equal(len(mine), 1, f"groups holding {host}")
    mine = mine[0]
    rc = read_json(os.path.join(cfg, "resourceconfig.json"))
    equal(rc.get("current_host"), host, "resourceconfig current_host")
    equal(rc.get("current_instance_type"), mine["type"], "resourceconfig current_instance_type")
    equal(rc.get("current_group_name"), mine["name"], "resourceconfig current_group_name")
    equal(rc.get("hosts"), all_hosts, "resourceconfig hosts (sorted)")
    equal(rc.get("instance_groups"),
          [{"instance_group_name": g["name"], "instance_type": g["type"], "hosts": g["hosts"]}
           for g in groups], "resourceconfig instance_groups")
    check(isinstance(rc.get("network_interface_name"), str) and rc["network_interface_name"],
          "resourceconfig network_interface_name")

    # --- inputdataconfig.json: the channels of this instance's group.
    idc = read_json(os.path.join(cfg, "inputdataconfig.json"))
    expected_idc = {}
    for name, ch in expect.get("channels", {}).items():
        if ch.get("groups") and mine["name"] not in ch["groups"]:
            continue
        entry = {}
        if ch.get("content_type") is not None:
            entry["ContentType"] = ch["content_type"]
        entry["TrainingInputMode"] = ch["mode"]
        entry["S3DistributionType"] = ch["distribution"]
        entry["RecordWrapperType"] = "None"
        expected_idc[name] = entry
    equal(idc, expected_idc, "inputdataconfig.json")
    for name in idc:
        check(list(idc[name].keys())[0] in ("ContentType", "TrainingInputMode"),
              "inputdataconfig member order")

    # --- Input data.
    for name, ch in expect.get("channels", {}).items():
        d = os.path.join(base, "input", "data", name)
        if name not in idc:
            check(not os.path.exists(d), f"channel {name} reached a group that does not receive it")
            continue
        for rel, text in ch.get("files", {}).items():
            p = os.path.join(d, rel)
            check(os.path.isfile(p), f"channel {name}: missing {rel}")
            with open(p) as f:
                equal(f.read(), text, f"channel {name}: contents of {rel}")

    # --- Every SM_* variable, derived again as the toolkit derives it.
    hps_all = {k: decode(v) for k, v in raw_hps.items()}
    sm_hps = {k: v for k, v in hps_all.items() if k in RESERVED or k.startswith("sagemaker_")}
    user_hps = {k: v for k, v in hps_all.items() if k not in sm_hps}
    framework = {k: v for k, v in sm_hps.items() if k not in RESERVED}
    group_names = [g["instance_group_name"] for g in rc["instance_groups"]]
    groups_dict = {g["instance_group_name"]: g for g in rc["instance_groups"]}
    current_group = rc["current_group_name"]
    group_hosts = groups_dict[current_group]["hosts"]
    if "sagemaker_distribution_instance_groups" in framework:
        dist_groups = framework["sagemaker_distribution_instance_groups"]
    else:
        dist_groups = [current_group] if any(framework.get(f, False) for f in DIST_FLAGS) else []
    dist_hosts = [h for g in rc["instance_groups"] if g["instance_group_name"] in dist_groups
                  for h in g["hosts"]]
    master = dist_hosts[0] if dist_hosts else rc["hosts"][0]
    program = env.get("SAGEMAKER_PROGRAM")
    module_name = program if program is not None else str(sm_hps.get("sagemaker_program", None))
    if module_name and module_name.endswith(".py"):
        module_name = module_name[:-3]
    entry_point = program or sm_hps.get("sagemaker_program")
    code_dir = os.path.join(base, "code")
    module_dir = str(sm_hps.get("sagemaker_submit_directory", code_dir))
    log_level = sm_hps.get("sagemaker_container_log_level", 20)
    channel_dirs = {c: os.path.join(base, "input", "data", c) for c in idc}
    paths = {
        "model_dir": os.path.join(base, "model"),
        "input_dir": os.path.join(base, "input"),
        "input_config_dir": os.path.join(base, "input", "config"),
        "output_dir": os.path.join(base, "output"),
        "output_data_dir": os.path.join(base, "output", "data"),
        "output_intermediate_dir": os.path.join(base, "output", "intermediate"),
    }
    # The toolkit reads SM_HP_MP_PARAMETERS from its own environment, where only
    # the job's Environment map could have put it.
    mp_env = expect.get("environment", {}).get("SM_HP_MP_PARAMETERS")
    mp = None if mp_env is None else (mp_env and mp_env != "{}")
    training_env = dict(paths)
    training_env.update({
        "additional_framework_parameters": framework,
        "channel_input_dirs": channel_dirs,
        "current_host": host,
        "current_instance_group": current_group,
        "current_instance_group_hosts": group_hosts,
        "current_instance_type": rc["current_instance_type"],
        "distribution_hosts": dist_hosts,
        "distribution_instance_groups": dist_groups,
        "framework_module": env.get("SAGEMAKER_TRAINING_MODULE"),
        "hosts": rc["hosts"],
        "hyperparameters": user_hps,
        "input_data_config": idc,
        "instance_groups": group_names,
        "instance_groups_dict": groups_dict,
        "is_hetero": len(group_names) > 1,
        "is_master": host == master,
        "is_modelparallel_enabled": mp,
        "job_name": env.get("TRAINING_JOB_NAME"),
        "log_level": log_level,
        "master_hostname": master,
        "module_dir": module_dir,
        "module_name": module_name,
        "network_interface_name": rc["network_interface_name"],
        "num_cpus": multiprocessing.cpu_count(),
        "num_gpus": 0,
        "num_neurons": 0,
        "resource_config": rc,
        "user_entry_point": entry_point,
    })
    expected = {
        "hosts": rc["hosts"],
        "network_interface_name": rc["network_interface_name"],
        "hps": user_hps,
        "user_entry_point": entry_point,
        "framework_params": framework,
        "resource_config": rc,
        "input_data_config": idc,
        "channels": sorted(channel_dirs.keys()),
        "current_host": host,
        "current_instance_type": rc["current_instance_type"],
        "current_instance_group": current_group,
        "current_instance_group_hosts": group_hosts,
        "instance_groups": group_names,
        "instance_groups_dict": groups_dict,
        "distribution_instance_groups": dist_groups,
        "is_hetero": len(group_names) > 1,
        "module_name": module_name,
        "log_level": log_level,
        "framework_module": env.get("SAGEMAKER_TRAINING_MODULE"),
        "num_cpus": multiprocessing.cpu_count(),
        "num_gpus": 0,
        "num_neurons": 0,
        "module_dir": module_dir,
        "training_env": training_env,
        "user_args": user_args(user_hps),
    }
    expected.update(paths)
    for name, path in channel_dirs.items():
        expected["channel_%s" % name] = path
    for k, v in user_hps.items():
        expected["hp_%s" % k] = v
    wanted = {"SM_%s" % k.upper(): env_value(v) for k, v in expected.items()}
    for k, v in sorted(wanted.items()):
        equal(env.get(k), v, k)
    given = sorted(k for k in env if k.startswith("SM_"))
    extra = [k for k in given if k not in wanted]
    equal(extra, [], "SM_* variables the toolkit does not derive")
    equal(env.get("CURRENT_HOST"), host, "CURRENT_HOST")

    # --- The sandbox.
    if runtime == "bwrap":
        try:
            with open("/usr/kiln-contract-probe", "w"):
                pass
            raise ContractError("the root file system is writable")
        except OSError:
            pass
        with open("/tmp/probe", "w") as f:
            f.write("x")
        for path in expect.get("hidden", []):
            check(not os.path.exists(path) or os.listdir(path) == [],
                  f"{path} is visible in the sandbox")
        # Peers resolve by host name.
        for h in rc["hosts"]:
            socket.gethostbyname(h)

    with open(os.path.join(base, "model", host + ".ok"), "w") as f:
        f.write(host)
    with open(os.path.join(base, "output", "data", host + ".txt"), "w") as f:
        f.write("output of " + host)
    print("CONTRACT OK " + host, flush=True)


if __name__ == "__main__":
    try:
        main()
    except ContractError as e:
        base = os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml")
        try:
            with open(os.path.join(base, "output", "failure"), "w") as f:
                f.write("contract: " + str(e))
        except OSError:
            pass
        print("CONTRACT FAILED: " + str(e), file=sys.stderr, flush=True)
        sys.exit(3)
