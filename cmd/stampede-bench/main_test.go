package main

import (
	"testing"

	"github.com/stampede-sh/stampede/app/apptest"
)

func TestMain(m *testing.M) { apptest.Main(m) }

// serviceArgs points the binary at the test's own servers (apptest.ServiceArgs).
func serviceArgs(t *testing.T) []string { t.Helper(); return apptest.ServiceArgs(t) }
