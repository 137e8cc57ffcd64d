//go:build tools

// Package tools pins the helm command that `kubetrain dev build` compiles for the chart's tests.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
