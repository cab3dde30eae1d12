# The two front doors: `make demo` and `make test`. Both install what they need first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN_DIR = $(shell tools/controlplane/build.sh)
NODE_BIN_DIR = $(shell tools/node/build.sh)
IMAGES_DIR = $(shell tools/images/build.sh)

.PHONY: setup debs node-debs venv binaries node images kind-e2e platforms integrations-venv test suite unit \
	demo demo-real lint dist image clean-binaries

setup: debs venv binaries

# Debian packages the control plane needs at run time, cairo with a font for the test that
# renders the timeline SVG, and Chromium for the tests of the web page (only installed when
# missing; playwright drives it by its executable_path).
debs:
	@command -v openssl >/dev/null || { apt-get update -qq && apt-get install -y -qq openssl; }
	@dpkg -s libcairo2 fonts-dejavu-core >/dev/null 2>&1 || { apt-get update -qq && \
		apt-get install -y -qq libcairo2 fonts-dejavu-core; }
	@# Open MPI's mpirun and MPICH's Hydra: tests/integrations starts the real Trainers with them.
	@dpkg -s openmpi-bin mpich >/dev/null 2>&1 || { apt-get update -qq && \
		apt-get install -y -qq --no-install-recommends openmpi-bin mpich; }
	@command -v chromium >/dev/null || { apt-get update -qq && \
		apt-get install -y -qq chromium; }

# The real node's (`tidings dev up --real-node`, tests/node): runc and the CNI plugins it runs
# pods with, iptables for kube-proxy, socat for the API server's link into its namespace; and
# what `make images` builds with: Debian's Docker engine and mmdebstrap (for the base image);
# jq and capsh for the kind run's engine and node image (tools/kind/).
NODE_DEBS := runc containernetworking-plugins iptables socat docker.io mmdebstrap jq libcap2-bin
node-debs:
	@dpkg -s $(NODE_DEBS) >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(NODE_DEBS); }

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

binaries:
	tools/controlplane/build.sh

# The real node's binaries (kubelet, kube-proxy, kube-scheduler of the plane's version; containerd)
# and the images its pods run (tidings-watcher:dev, tidings-workload:dev from deploy/Dockerfile,
# the pause image), each cached in .cache/ by version or by a hash of their inputs. The node's
# Kubernetes binaries reuse most of what the plane's build compiled: after it, not beside it.
node: node-debs binaries
	tools/node/build.sh >/dev/null
images: node-debs
	tools/images/build.sh >/dev/null

# deploy/kind/e2e.sh on a kind cluster whose node image is built here from the binaries and
# images above (tools/kind/build-node-image.sh, cached in .cache/kind/): not in `make test`
# (its cost: deploy/README.md, "kind, for real").
kind-e2e: node images
	deploy/kind/e2e.sh

# The platforms' real controllers the tests run on the local plane (JobSet, Kubeflow Trainer,
# Argo Workflows): each from its pinned module in tools/platforms/<name>/, cached by version in
# .cache/platforms/ (a platform bump rebuilds that platform alone). Test-only, never shipped.
platforms:
	tools/platforms/build.sh >/dev/null

# The real frameworks tidings.integrations is tested against (torch brings ~3 GB of CUDA
# libraries): a venv of their own, named by the hash of their pins and kept while the pins
# stay (existence, not mtimes: a fresh checkout must not reinstall torch), so the workload
# install never pulls them and a second run installs nothing. The project itself is
# (re)installed into it when pyproject.toml changes, which costs seconds.
INTEGRATIONS_REQ := tests/integrations/requirements.txt
INTEGRATIONS_VENV = .cache/integrations/v1-$(shell sha256sum < $(INTEGRATIONS_REQ) | cut -c1-12)

integrations-venv: $(INTEGRATIONS_VENV)/.project
$(INTEGRATIONS_VENV)/.project: pyproject.toml
	@test -f $(INTEGRATIONS_VENV)/.complete || { rm -rf $(INTEGRATIONS_VENV) \
	  && $(PYTHON) -m venv $(INTEGRATIONS_VENV) \
	  && $(INTEGRATIONS_VENV)/bin/pip install -q --upgrade pip \
	  && $(INTEGRATIONS_VENV)/bin/pip install -q -r $(INTEGRATIONS_REQ) \
	  && touch $(INTEGRATIONS_VENV)/.complete; }
	$(INTEGRATIONS_VENV)/bin/pip install -q -e '.[dev]'
	touch $@

# The Go builds (CPU) run beside the frameworks' venv install and the images' build (network).
# The suite runs in a make of its own: make expands a whole recipe before its first line, and
# the folders' $(shell ...) would otherwise build everything one after the other, first.
test: debs node-debs venv
	$(MAKE) --no-print-directory -j4 binaries node platforms integrations-venv images
	$(MAKE) --no-print-directory suite

suite:
	TIDINGS_BIN_DIR=$(BIN_DIR) TIDINGS_NODE_BIN_DIR=$(NODE_BIN_DIR) TIDINGS_IMAGES_DIR=$(IMAGES_DIR) \
		$(VENV)/bin/pytest
	TIDINGS_BIN_DIR=$(BIN_DIR) $(INTEGRATIONS_VENV)/bin/pytest tests/integrations

unit: venv
	$(VENV)/bin/pytest tests/unit

demo: setup
	TIDINGS_BIN_DIR=$(BIN_DIR) deploy/demo.sh

# The demo's story with real containers: the watcher from its chart, a Job's pods, an OOM kill.
demo-real: setup node images
	TIDINGS_BIN_DIR=$(BIN_DIR) TIDINGS_NODE_BIN_DIR=$(NODE_BIN_DIR) TIDINGS_IMAGES_DIR=$(IMAGES_DIR) \
		deploy/demo-real.sh

# mypy --strict (pyproject's [tool.mypy]) over the installed names; tidings/'s symlinks let it
# resolve tidings.* to the top-level folders.
MYPY_TARGETS := -p tidings.schemas -p tidings.kube -p tidings.emitter -p tidings.watcher -p tidings.cli -p tidings.ui -p tidings.integrations -m tools.devcluster -m tools.devplatforms -m tools.devnode -m tools.devprocess -m tools.devpki
lint: venv
	$(VENV)/bin/ruff check schemas kube emitter watcher cli ui integrations tidings tests bench tools
	$(VENV)/bin/mypy $(MYPY_TARGETS)

# The wheel (pure Python, one for every platform) into $(DIST)/: `pip install
# dist/tidings-*.whl`, with extras as `'tidings[cli] @ file://...'`. pip wheel rather than
# `python -m build`, which a build/ folder in the checkout would shadow. setuptools stages in
# build/lib, and a file deleted from the source would still ship from there: cleared.
DIST ?= dist
dist: venv
	rm -rf build/lib build/bdist.* $(DIST)/tidings-*.whl
	$(VENV)/bin/pip wheel -q --no-deps --no-build-isolation -w $(DIST) .
	rm -rf build/lib build/bdist.*
	@ls $(DIST)/tidings-*.whl

# The watcher image, built from deploy/Dockerfile and pushed, in one command:
#   make image IMAGE=registry.example/tidings-watcher:0.1.0   (DOCKER=podman works the same)
# then it prints how the chart and the kustomize base take it.
DOCKER ?= docker
image:
	@test -n "$(IMAGE)" || { echo "set IMAGE=REGISTRY/tidings-watcher:TAG" >&2; exit 2; }
	$(DOCKER) build -f deploy/Dockerfile -t $(IMAGE) .
	$(DOCKER) push $(IMAGE)
	@repo='$(IMAGE)'; tag=$${repo##*:}; repo=$${repo%:*}; \
	echo "helm:      helm install tidings deploy/chart -n tidings-system --set image.repository=$$repo --set image.tag=$$tag"; \
	echo "kustomize: an overlay of deploy/ with images: [{name: tidings-watcher, newName: $$repo, newTag: $$tag}]"

clean-binaries:
	rm -rf .cache/controlplane
