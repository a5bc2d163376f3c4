"""What a schema cannot see in the rendered deploy/kubernetes/ manifests:
that the resources fit together (the Service selects the StatefulSet's pods
on the port sut-node listens on, loadgen-node's dns:// entry names that
Service and port and waits for the StatefulSet's node count, every
ConfigMap and claim referred to exists, every $(VAR) is defined, the probes
and metrics ports are the ones the programs use).

Usage: check_manifests.py RENDERED.yaml
Prints both containers' arguments with the variables expanded, as JSON
({"sut-node": [...], "loadgen-node": [...]}), on success; exits 1 naming
each problem otherwise."""

import json
import re
import sys

import yaml

problems = []


def check(ok, what):
    if not ok:
        problems.append(what)


def one(docs, kind, name=None):
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    check(len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}")
    return found[0] if found else {}


def arg_after(args, flag):
    return args[args.index(flag) + 1] if flag in args else None


def env_of(container, configmaps, pod):
    """The container's environment as Kubernetes builds it (envFrom, then
    env), in pod `pod`."""
    env = {}
    for src in container.get("envFrom", []):
        ref = src.get("configMapRef", {}).get("name")
        check(ref in configmaps, f"envFrom names a missing ConfigMap {ref}")
        env.update(configmaps.get(ref, {}).get("data", {}))
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = e["value"]
        elif "configMapKeyRef" in e.get("valueFrom", {}):
            ref = e["valueFrom"]["configMapKeyRef"]
            data = configmaps.get(ref["name"], {}).get("data", {})
            check(ref["key"] in data, f"env {e['name']} names a missing key {ref['name']}/{ref['key']}")
            env[e["name"]] = data.get(ref["key"], "")
        else:
            field = e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
            check(field == "metadata.name", f"env {e['name']}: only the pod's name is filled in here")
            env[e["name"]] = pod
    return env


def expand(args, env, who):
    out = []
    for a in args:
        for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", a):
            check(var in env, f"{who}: $({var}) is not in its environment")
        out.append(re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), a))
    return out


def main(path):
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    configmaps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
    claims = {d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"}

    svc = one(docs, "Service", "sut-nodes")
    sts = one(docs, "StatefulSet")
    job = one(docs, "Job")
    if not (svc and sts and job):
        return

    # The Service: headless, selecting the StatefulSet's pods.
    check(svc["spec"].get("clusterIP") == "None", "the sut-nodes Service must be headless (clusterIP: None)")
    check(sts["spec"]["serviceName"] == svc["metadata"]["name"], "the StatefulSet's serviceName is not the Service")
    labels = sts["spec"]["template"]["metadata"]["labels"]
    check(all(labels.get(k) == v for k, v in svc["spec"]["selector"].items()), "the Service does not select the sut-node pods")
    check(all(labels.get(k) == v for k, v in sts["spec"]["selector"]["matchLabels"].items()), "the StatefulSet's selector does not match its pods")

    # The sut-node: listening where the Service, probe and annotations say.
    node = sts["spec"]["template"]["spec"]["containers"][0]
    node_args = expand(node["args"], env_of(node, configmaps, sts["metadata"]["name"] + "-0"), "sut-node")
    check(node_args[0] == "serve", "the sut-node container must run `serve`")
    port = int(arg_after(node_args, "--listen").rsplit(":", 1)[1])
    svc_ports = {(p["port"], p["protocol"]) for p in svc["spec"]["ports"]}
    check((port, "TCP") in svc_ports and (port, "UDP") in svc_ports, f"the Service lacks TCP and UDP {port} (gRPC, QUIC)")
    probe = node.get("readinessProbe", {}).get("exec", {}).get("command", [])
    check(probe[:2] == ["/usr/local/bin/sut-node", "health"] and arg_after(probe, "--addr") == f"127.0.0.1:{port}", f"the readiness probe must be `sut-node health --addr 127.0.0.1:{port}`: {probe}")
    check("nvidia.com/gpu" in node.get("resources", {}).get("limits", {}), "the sut-node requests no nvidia.com/gpu")
    annotations = sts["spec"]["template"]["metadata"].get("annotations", {})
    node_metrics = arg_after(node_args, "--metrics")
    check(node_metrics and annotations.get("prometheus.io/port") == node_metrics.rsplit(":", 1)[1], "the sut-node's prometheus.io/port is not its --metrics port")

    # The Job: finding the nodes by the Service's name, waiting for all of them.
    spec = job["spec"]["template"]["spec"]
    lg = spec["containers"][0]
    lg_args = expand(lg["args"], env_of(lg, configmaps, job["metadata"]["name"]), "loadgen-node")
    sut = arg_after(lg_args, "--sut")
    m = re.fullmatch(r"dns://([^:]+):(\d+)\?nodes=(\d+)", sut or "")
    check(m is not None, f"loadgen-node's --sut must be dns://SERVICE:PORT?nodes=N: {sut}")
    if m:
        check(m.group(1) == svc["metadata"]["name"], f"--sut names {m.group(1)}, not the Service {svc['metadata']['name']}")
        check(int(m.group(2)) == port, f"--sut port {m.group(2)} is not the nodes' {port}")
        check(int(m.group(3)) == sts["spec"]["replicas"], f"--sut waits for {m.group(3)} nodes, the StatefulSet has {sts['spec']['replicas']}")
    lg_annotations = job["spec"]["template"]["metadata"].get("annotations", {})
    lg_metrics = arg_after(lg_args, "--metrics")
    check(lg_metrics and lg_annotations.get("prometheus.io/port") == lg_metrics.rsplit(":", 1)[1], "loadgen-node's prometheus.io/port is not its --metrics port")
    check(spec.get("restartPolicy") == "Never" and job["spec"].get("backoffLimit") == 0, "a failed run must not be re-run over its logs")
    mounts = {v["name"]: v["mountPath"] for v in lg.get("volumeMounts", [])}
    for v in spec.get("volumes", []):
        if "persistentVolumeClaim" in v:
            check(v["persistentVolumeClaim"]["claimName"] in claims, f"volume {v['name']} names a missing claim")
        if "configMap" in v:
            check(v["configMap"]["name"] in configmaps, f"volume {v['name']} names a missing ConfigMap")
    out = arg_after(lg_args, "--output-dir") or ""
    check(any(out.startswith(p + "/") for n, p in mounts.items() if n == "results"), f"--output-dir {out} is not on the results volume")
    conf = arg_after(lg_args, "--user-conf") or ""
    check(any(conf.startswith(p + "/") for n, p in mounts.items() if n == "conf"), f"--user-conf {conf} is not on the conf volume")

    if not problems:
        print(json.dumps({"sut-node": node_args, "loadgen-node": lg_args}))


if __name__ == "__main__":
    main(sys.argv[1])
    for p in problems:
        print(f"deploy/kubernetes: {p}", file=sys.stderr)
    sys.exit(1 if problems else 0)
