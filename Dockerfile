# syntax=docker/dockerfile:1
#
# nfsrdma-csi: one image, entrypoint /driver, for every role
# (controller, node, mounter, server).
#
#   docker build -t ghcr.io/nfsrdma/nfsrdma-csi:v0.1.0 --build-arg VERSION=v0.1.0 .
#
# The binary is static (CGO_ENABLED=0): RDMA is the built-in software iWARP
# stack. The libibverbs provider (cgo, build tag) needs rdma-core's
# libraries at run time and is not part of this image.
#
# The image runs as the distroless "nonroot" user (65532). The controller
# runs so. The Helm chart runs these as root, with the privileges they
# need and no more (see deploy/helm/nfsrdma-csi/templates):
#   node     privileged: mount(2) of FUSE file systems into kubelet's pod
#            volume directories with Bidirectional propagation (Kubernetes
#            allows that only to privileged containers), /dev/fuse, kubelet's
#            device-plugins and plugins_registry directories.
#   mounter  root with IPC_LOCK (pin RDMA memory regardless of
#            RLIMIT_MEMLOCK) and SYS_RESOURCE (raise RLIMIT_MEMLOCK);
#            privileged only to reach the host's /dev/infiniband nodes
#            (node.mounter.rdmaDevices=privileged).
#   server   root with CHOWN, DAC_OVERRIDE, DAC_READ_SEARCH
#            (open_by_handle_at), FOWNER, FSETID, MKNOD, IPC_LOCK: an NFS
#            server acting for AUTH_SYS users on the exported tree.

ARG GO_IMAGE=golang:1.26-bookworm
ARG BASE_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS build
ARG TARGETOS=linux
ARG TARGETARCH
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY cmd/ cmd/
COPY pkg/ pkg/
COPY internal/ internal/
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/driver ./cmd/driver

FROM ${BASE_IMAGE}
LABEL org.opencontainers.image.source="https://github.com/nfsrdma/nfsrdma-csi" \
      org.opencontainers.image.description="CSI driver: NFS volumes over RPC-over-RDMA through per-pod FUSE mounts"
COPY --from=build /out/driver /driver
USER 65532:65532
ENTRYPOINT ["/driver"]
