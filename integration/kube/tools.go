//go:build tools

// Package tools pins the kube-apiserver main package as a dependency of this
// module so that `go mod tidy` keeps k8s.io/kubernetes (and everything
// kube-apiserver needs) in go.mod/go.sum. It is never compiled into anything;
// build-kube-apiserver.sh builds k8s.io/kubernetes/cmd/kube-apiserver directly.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
