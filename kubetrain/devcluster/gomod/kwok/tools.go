//go:build tools

// Package tools pins the kwok controller that `kubetrain dev build` compiles.
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
