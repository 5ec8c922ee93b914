package main

import (
	"slices"
	"testing"
)

// TestNoDeadlineOnlyForCallsThatReturnAtOnce: -no-deadline takes the
// deadline away only from the uncontended cycles, whose calls never wait;
// a scenario whose calls wait for a lock, a permit or a set would
// otherwise run past its window.
func TestNoDeadlineOnlyForCallsThatReturnAtOnce(t *testing.T) {
	var got []string
	for _, sc := range scenarios {
		if sc.cycles() {
			got = append(got, sc.id)
		}
	}
	if want := []string{"serial", "parallel"}; !slices.Equal(got, want) {
		t.Fatalf("scenarios run without a deadline under -no-deadline: %v, want %v", got, want)
	}
}
