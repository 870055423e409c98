#!/usr/bin/env python3
"""Checks the deployment files as far as tools here allow (no Docker engine): the YAML and
JSON parse, every file docker-compose.yml mounts exists, every image is pinned to a
version, Grafana's dashboard uses the provisioned datasource, every metric the alert
rules and the dashboard query is one ktimer defines (src/metrics.rs), and the Kubernetes
manifests (deploy/kubernetes/) validate against the Kubernetes schemas (kubernetes-validate,
offline, strict), pin their images and set only variables ktimer reads."""
import json, os, re, sys
import yaml

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.chdir(root)
problems = []
compose = yaml.safe_load(open("docker-compose.yml"))
for name, svc in compose["services"].items():
    image = svc.get("image")
    if image and (":" not in image or image.endswith(":latest")):
        problems.append(f"service {name}: image {image} is not pinned to a version")
    for v in svc.get("volumes", []):
        src = v.split(":")[0]
        if src.startswith(".") and not os.path.exists(src):
            problems.append(f"service {name}: mounts {src}, which does not exist")
prom = yaml.safe_load(open("deploy/prometheus/prometheus.yml"))
rules = yaml.safe_load(open("deploy/prometheus/rules.yml"))
for f in os.listdir("deploy/grafana/provisioning/datasources"):
    yaml.safe_load(open(os.path.join("deploy/grafana/provisioning/datasources", f)))
uids = {d["uid"] for f in os.listdir("deploy/grafana/provisioning/datasources")
        for d in yaml.safe_load(open(os.path.join("deploy/grafana/provisioning/datasources", f)))["datasources"]}
dash = json.load(open("deploy/grafana/dashboards/ktimer.json"))
exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
for p in dash["panels"]:
    if p["datasource"]["uid"] not in uids:
        problems.append(f"panel {p['title']}: datasource {p['datasource']['uid']} is not provisioned")
    exprs += [t["expr"] for t in p["targets"]]
src = open("src/metrics.rs").read()
defined = set(re.findall(r'"([a-z_]+)"', src))
for e in exprs:
    for m in re.findall(r"ktimer_([a-z_]+)", e):
        base = re.sub(r"_(bucket|sum|count)$", "", m)
        if base not in defined:
            problems.append(f"metric ktimer_{m} (in {e!r}) is not defined in src/metrics.rs")
import glob
import kubernetes_validate

known = set(re.findall(r'env = "(KTIMER_[A-Z_]+)"', "".join(open(f).read() for f in glob.glob("src/config/*.rs"))))
manifests = 0
for path in sorted(glob.glob("deploy/kubernetes/*.yaml")):
    for doc in yaml.safe_load_all(open(path)):
        manifests += 1
        name = f"{path}: {doc['kind']}/{doc['metadata']['name']}"
        try:
            kubernetes_validate.validate(doc, "1.30.0", strict=True)
        except Exception as e:  # ValidationError, or a schema the package lacks
            problems.append(f"{name}: {e}")
        for key in (doc.get("data") or {}) if doc["kind"] == "ConfigMap" else ():
            if key not in known:
                problems.append(f"{name}: {key} is not a variable ktimer reads")
        pod = doc.get("spec", {}).get("template", {}).get("spec", {})
        for c in pod.get("containers", []) + pod.get("initContainers", []):
            if ":" not in c["image"] or c["image"].endswith(":latest"):
                problems.append(f"{name}: image {c['image']} is not pinned to a version")
            for e in c.get("env", []):
                if e["name"].startswith("KTIMER_") and e["name"] not in known:
                    problems.append(f"{name}: {e['name']} is not a variable ktimer reads")
if manifests == 0:
    problems.append("no Kubernetes manifests in deploy/kubernetes/")
for p in problems:
    print("check-deploy:", p, file=sys.stderr)
if problems:
    sys.exit(1)
print(f"check-deploy: ok ({len(compose['services'])} services, {len(exprs)} queries, {manifests} Kubernetes objects)", file=sys.stderr)
