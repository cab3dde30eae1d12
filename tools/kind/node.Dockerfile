# The kind node image, built by tools/kind/build-node-image.sh from what this machine builds:
# kind's own base (images/base/Dockerfile of the kind module) and node-image build
# (pkg/build/nodeimage), step for step, where the packages come from Debian (BASE, made by
# mmdebstrap) and the binaries and images from this repository's builds instead of downloads.
# The context (assembled by the script):
#   kind-files/   kind's images/base/files, from the kind module
#   bin/          containerd, containerd-shim-runc-v2, ctr, crictl, kubeadm, kubelet, kubectl
#   preload/      images.tar: the control plane's images, pause, the pod network's image
#   default-cni.yaml
ARG BASE
FROM ${BASE}

# ---- kind's base image ----------------------------------------------------------------------
COPY kind-files/usr/local/bin/ /usr/local/bin/
COPY kind-files/kind/ /kind/
COPY kind-files/etc/ /etc/
RUN chmod 0755 /kind /kind/bin /kind/bin/* /usr/local/bin/* \
    && find /kind /etc/containerd /etc/default /etc/sysctl.d /etc/systemd/system /etc/crictl.yaml \
         -type f ! -path '/kind/bin/*' -exec chmod 0644 {} + \
    && find /lib/systemd/system/sysinit.target.wants/ -name "systemd-tmpfiles-setup.service" -delete \
    && rm -f /lib/systemd/system/multi-user.target.wants/* \
    && rm -f /etc/systemd/system/*.wants/* \
    && rm -f /lib/systemd/system/local-fs.target.wants/* \
    && rm -f /lib/systemd/system/sockets.target.wants/*udev* \
    && rm -f /lib/systemd/system/sockets.target.wants/*initctl* \
    && rm -f /lib/systemd/system/basic.target.wants/* \
    && echo "ReadKMsg=no" >> /etc/systemd/journald.conf \
    && ln -sf /usr/lib/systemd/systemd /sbin/init
RUN systemctl enable kubelet.service \
    && systemctl enable containerd.service \
    && systemctl enable undo-mount-hacks.service \
    && systemctl mask systemd-binfmt.service \
    && mkdir -p /etc/kubernetes/manifests
COPY bin/containerd bin/containerd-shim-runc-v2 bin/ctr bin/crictl /usr/local/bin/
RUN ctr oci spec \
        | jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
        | jq 'del(.process.rlimits)' \
        > /etc/containerd/cri-base.json \
    && containerd --version && runc --version
# runc and the CNI plugins are Debian's (kind builds its own); containerd looks in /opt/cni/bin.
RUN mkdir -p /opt/cni && ln -s /usr/lib/cni /opt/cni/bin

# ---- what this machine needs (a VM with cgroup v1 whose root lacks CAP_SYS_RESOURCE) --------
ARG PAUSE_IMAGE
# Nothing here may lower an oom_score_adj: containerd clamps its containers' (else every pod
# sandbox fails in runc: "can't get final child's PID from pipe: EOF"), and systemd must not
# try for containerd itself (the unit fails at once otherwise). The sandbox image is the
# pause this repository builds (kind pins its own tag in this file).
RUN sed -i -e 's/restrict_oom_score_adj = false/restrict_oom_score_adj = true/' \
      -e "s|sandbox_image = .*|sandbox_image = \"${PAUSE_IMAGE}\"|" /etc/containerd/config.toml \
    && grep -q 'restrict_oom_score_adj = true' /etc/containerd/config.toml \
    && sed -i '/^OOMScoreAdjust=/d' /etc/systemd/system/containerd.service \
    && mkdir -p /etc/kubernetes/kubelet.conf.d \
    && sed -i 's|^KUBELET_EXTRA_ARGS=.*|& --config-dir=/etc/kubernetes/kubelet.conf.d|' /etc/default/kubelet
# The kubelet (1.35+) refuses a cgroup v1 host unless told; kubeadm's config stays kind's.
COPY kubelet-tidings.conf /etc/kubernetes/kubelet.conf.d/50-tidings.conf

# ---- kind's node image build ---------------------------------------------------------------
ARG KUBE_VERSION
COPY bin/kubeadm bin/kubelet bin/kubectl /usr/bin/
COPY default-cni.yaml /kind/manifests/default-cni.yaml
# No default-storage.yaml: kind then installs its fallback StorageClass `standard`
# (kubernetes.io/host-path, the controller manager's provisioner kind enables), which needs
# no image.
RUN echo -n "${KUBE_VERSION}" > /kind/version
RUN --mount=type=bind,source=preload,target=/preload \
    (containerd >/tmp/containerd.log 2>&1 &) \
    && for i in $(seq 50); do [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && break; sleep 0.2; done \
    && ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned \
         --all-platforms --no-unpack --digests /preload/images.tar \
    && ctr --namespace=k8s.io images list -q \
    && pkill -x containerd && while pgrep -x containerd >/dev/null; do sleep 0.1; done \
    && rm -rf /tmp/containerd.log /run/containerd

ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]
