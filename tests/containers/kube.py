"""deploy/kubernetes/ played with `podman kube play`, as `kubectl apply -k` would apply it.

podman 4.3 (Debian 12) plays Pods, Deployments and ConfigMaps; the rest is read here, with the
meaning Kubernetes gives it, and any other key of the kustomization is refused:

- the kustomization's `resources`, `labels`, `secretGenerator` (`envs` files) and `images`,
  and a name prefix of the test's (kustomize's `namePrefix`);
  the Secret keeps its name (kustomize adds a hash of the content to it and to every reference:
  the same thing);
- a Secret becomes a podman secret, in the form podman's kube play reads back (a JSON map of
  base64 values; 4.3 cannot read the one it makes from a `kind: Secret` itself);
- the release Job's pod template is played as a Pod first, and waited for (exit 0), as
  Kubernetes runs a Job; podman has no Job;
- a Deployment's init containers are played as a Pod of their own and waited for before its
  pod starts, as Kubernetes orders them (podman 4.3 does not wait for them here);
- Services and PodDisruptionBudgets have nothing to run: they are checked to select the pods
  of a Deployment of the same files.

Every pod joins the host's network (`--network host`) and reaches PostgreSQL and Redis on the
machine's loopback; each keeps a host name of its own (the pod's name), as in a cluster.
podman starts one pod per Deployment whatever its `replicas`. podman turns a probe into the
container's health check; an `httpGet` one becomes a `curl` command, and the image has no
curl, so the web's probes are asked by the test itself (GET /healthz, /readyz), the others'
(`exec`) with `podman healthcheck run`.
"""

from __future__ import annotations

import base64
import copy
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.containers.compose import read_env_file
from tests.containers.engine import podman

KUSTOMIZATION_KEYS = frozenset({"apiVersion", "kind", "labels", "resources", "secretGenerator", "images"})
PLAYED = ("ConfigMap", "Deployment")
CHECKED = ("Service", "PodDisruptionBudget")


class KubeError(ValueError):
    """Something the reader does not know, or a resource that selects nothing."""


def pod_specs(document: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    if document["kind"] in ("Deployment", "Job"):
        yield document["spec"]["template"]["spec"]


def containers(document: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    for spec in pod_specs(document):
        yield from spec.get("initContainers", [])
        yield from spec["containers"]


@dataclass
class Kustomization:
    folder: Path
    #: ConfigMap entries to set, by ConfigMap name (the test's own settings).
    config: dict[str, dict[str, str]] = field(default_factory=dict)
    #: The folder of secrets.env (the test's, not the checkout's).
    secrets_folder: Path | None = None
    #: Image name overrides: {name: newName:newTag} replacing the kustomization's.
    images: dict[str, str] = field(default_factory=dict)
    #: On the host's network a container port is the host's: where each listens instead
    #: ({containerPort: port}; the ConfigMap's PORT says the same to the process).
    host_ports: dict[int, int] = field(default_factory=dict)
    #: Labels of every pod played (the test run's owner label: engine.remove_orphans).
    pod_labels: dict[str, str] = field(default_factory=dict)
    #: Put before every name and every reference to one, as kustomize's `namePrefix` does:
    #: runs on one machine then never touch each other's pods and secrets.
    name_prefix: str = ""
    documents: list[dict[str, Any]] = field(default_factory=list)
    secrets: dict[str, dict[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        kustomization = yaml.safe_load((self.folder / "kustomization.yaml").read_text())
        unknown = set(kustomization) - KUSTOMIZATION_KEYS
        if unknown:
            raise KubeError(f"kustomization keys the reader does not know: {sorted(unknown)}")
        for resource in kustomization["resources"]:
            self.documents += [d for d in yaml.safe_load_all((self.folder / resource).read_text()) if d]
        for entry in kustomization.get("secretGenerator", []):
            if set(entry) - {"name", "envs"}:
                raise KubeError(f"secretGenerator keys the reader does not know: {sorted(entry)}")
            values: dict[str, str] = {}
            for env_file in entry["envs"]:
                values.update(read_env_file((self.secrets_folder or self.folder) / env_file))
            self.secrets[entry["name"]] = values
        self.secrets = {self.name_prefix + name: values for name, values in self.secrets.items()}
        images = {i["name"]: f"{i['newName']}:{i['newTag']}" for i in kustomization.get("images", [])}
        images.update(self.images)
        labels: dict[str, str] = {}
        for entry in kustomization.get("labels", []):
            labels.update(entry["pairs"])
        for document in self.documents:
            self.transform(document, labels, images)
        self.check_selectors()

    def transform(
        self, document: dict[str, Any], labels: Mapping[str, str], images: Mapping[str, str]
    ) -> None:
        """What kustomize (and the test's overrides) do to one resource: labels, the name prefix
        on names and references, images, the ConfigMap's values; the run's labels on pods."""
        original = document["metadata"]["name"]
        document["metadata"].setdefault("labels", {}).update(labels)
        document["metadata"]["name"] = self.name(original)
        for container in containers(document):
            container["image"] = images.get(container["image"], container["image"])
            for source in container.get("envFrom", []):
                for ref in source.values():
                    ref["name"] = self.name(ref["name"])
        if document["kind"] == "ConfigMap":
            document["data"].update(self.config.get(original, {}))
        if document["kind"] in ("Deployment", "Job"):
            document["spec"]["template"]["metadata"].setdefault("labels", {}).update(self.pod_labels)

    def on_host_network(self, container: dict[str, Any]) -> None:
        """Ports as a pod on the host's network has them: no mapping (podman refuses one there),
        each probe's port (by name or number) the one the process listens on."""
        named = {port["name"]: port["containerPort"] for port in container.pop("ports", []) if "name" in port}
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            http = container.get(probe, {}).get("httpGet")
            if http is not None:
                number = named.get(http["port"], http["port"])
                http["port"] = self.host_ports.get(number, number)

    def name(self, name: str) -> str:
        """A resource's name as played."""
        return self.name_prefix + name

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.documents if d["kind"] == kind]

    def check_selectors(self) -> None:
        """Every Service and PodDisruptionBudget selects the pods of some Deployment."""
        templates = [d["spec"]["template"]["metadata"]["labels"] for d in self.of_kind("Deployment")]
        for document in self.documents:
            if document["kind"] not in (*PLAYED, *CHECKED, "Job"):
                raise KubeError(f"a kind the reader does not know: {document['kind']}")
            if document["kind"] in CHECKED:
                selector = document["spec"]["selector"]
                wanted = selector.get("matchLabels", selector)
                if not any(wanted.items() <= labels.items() for labels in templates):
                    raise KubeError(f"{document['kind']} {document['metadata']['name']} selects no pod")

    # -- podman --------------------------------------------------------------------------------

    def create_secrets(self) -> None:
        for name, values in self.secrets.items():
            encoded = {key: base64.b64encode(value.encode()).decode() for key, value in values.items()}
            podman("secret", "rm", name, check=False)
            podman("secret", "create", name, "-", input_text=json.dumps(encoded))

    def remove_secrets(self) -> None:
        for name in self.secrets:
            podman("secret", "rm", name, check=False)

    def job_pods(self) -> list[dict[str, Any]]:
        """Each Job's pod template as a Pod (named as the Job)."""
        return [one_shot(job["metadata"]["name"], job["spec"]["template"]) for job in self.of_kind("Job")]

    def init_pods(self) -> list[dict[str, Any]]:
        """Each Deployment's init containers as a one-shot Pod (`<name>-init`), to run to the end
        before the Deployment's pod starts. podman 4.3 starts a pod's containers without waiting
        for its init containers here (and then fails to remove the one still running)."""
        pods = []
        for deployment in self.of_kind("Deployment"):
            template = copy.deepcopy(deployment["spec"]["template"])
            init = template["spec"].pop("initContainers", [])
            if init:
                template["spec"]["containers"] = init
                pods.append(one_shot(f"{deployment['metadata']['name']}-init", template))
        return pods

    def deployments(self) -> list[dict[str, Any]]:
        """The Deployments as played: without their init containers (`init_pods` runs them first),
        on the host's network."""
        played = copy.deepcopy(self.of_kind("Deployment"))
        for deployment in played:
            deployment["spec"]["template"]["spec"].pop("initContainers", None)
            for container in containers(deployment):
                self.on_host_network(container)
            own_empty_dirs(deployment["metadata"]["name"], deployment["spec"]["template"]["spec"])
        return played

    def playable(self, kinds: tuple[str, ...]) -> list[dict[str, Any]]:
        return [d for d in self.documents if d["kind"] in kinds]

    def play(self, path: Path, documents: list[dict[str, Any]], played: list[Path]) -> None:
        """`podman kube play` of `documents`, written to `path` (added to `played` first, so that
        `down` removes whatever a failed play left)."""
        path.write_text(yaml.safe_dump_all(documents, sort_keys=False))
        played.append(path)
        self.down(path)  # what an earlier run that was killed left
        podman("kube", "play", "--replace", "--network", "host", str(path), timeout=300)

    def down(self, path: Path) -> None:
        """Every pod of `path` removed (`kube down` leaves a pod whose start failed, and podman
        names a Deployment's pod `<name>-pod-N` with the next N when an earlier one is left)."""
        listed = json.loads(podman("pod", "ps", "--format", "json").stdout or "[]")
        existing = [str(pod["Name"]) for pod in listed]
        documents = list(yaml.safe_load_all(path.read_text()))
        for document in documents:
            name = document["metadata"]["name"]
            if document["kind"] == "Pod":
                pods = [p for p in existing if p == name]
            elif document["kind"] == "Deployment":
                pods = [p for p in existing if re.fullmatch(rf"{re.escape(name)}-pod-\d+", p)]
            else:
                continue
            for pod in pods:
                podman("pod", "rm", "--force", "--time", "0", pod, check=False, timeout=120)
        for volume in empty_dir_volumes(documents):
            podman("volume", "rm", "--force", volume, check=False)


def one_shot(name: str, template: Mapping[str, Any]) -> dict[str, Any]:
    """A pod template as a Pod of its own that runs once (a Job's, an init step's)."""
    spec = {**copy.deepcopy(template["spec"]), "restartPolicy": "Never"}
    own_empty_dirs(name, spec)
    metadata = {"name": name, "labels": dict(template["metadata"].get("labels", {}))}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def own_empty_dirs(pod: str, spec: dict[str, Any]) -> None:
    """podman 4.3 makes an `emptyDir` a named volume of the volume's name, shared by every pod
    that names one alike; Kubernetes gives each pod its own. So each is renamed `<pod>-<name>`."""
    renamed = {}
    for volume in spec.get("volumes", []):
        if "emptyDir" in volume:
            renamed[volume["name"]] = volume["name"] = f"{pod}-{volume['name']}"
    for container in [*spec.get("initContainers", []), *spec["containers"]]:
        for mount in container.get("volumeMounts", []):
            mount["name"] = renamed.get(mount["name"], mount["name"])


def empty_dir_volumes(documents: list[dict[str, Any]]) -> list[str]:
    """The named volumes podman made for the `emptyDir`s of `documents` (Pods, Deployments)."""
    names = []
    for document in documents:
        spec = (
            document["spec"]
            if document["kind"] == "Pod"
            else document.get("spec", {}).get("template", {}).get("spec", {})
        )
        names += [v["name"] for v in spec.get("volumes", []) if "emptyDir" in v]
    return names


def pod_name(deployment: str) -> str:
    """The pod podman makes for a Deployment."""
    return f"{deployment}-pod-0"


def container_name(pod: str, container: str) -> str:
    return f"{pod}-{container}"
