package main

import "testing"

func TestFlakesOnlyOnTheFirstExecUnderTheFault(t *testing.T) {
	tmp := t.TempDir()
	if flakesNow("", 0, 42, tmp) || flakesNow("exec-once", 7, 42, tmp) || flakesNow("exec-once", 0, 1, tmp) {
		t.Fatal("flaked without the fault, in a container's own process, or as PID 1")
	}
	if !flakesNow("exec-once", 0, 42, tmp) {
		t.Fatal("the first exec did not flake")
	}
	if flakesNow("exec-once", 0, 43, tmp) {
		t.Fatal("the second exec flaked too")
	}
}
