# kube-apiserver as make compose-test runs it: the binary `make e2e` builds
# (integration/kube/build-kube-apiserver.sh; static) on BASE_IMAGE, in the
# place registry.k8s.io's image has it. The build context holds only the
# binary.
ARG BASE_IMAGE=scratch
FROM ${BASE_IMAGE}
COPY kube-apiserver /usr/local/bin/kube-apiserver
ENTRYPOINT ["/usr/local/bin/kube-apiserver"]
