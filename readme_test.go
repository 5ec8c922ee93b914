package locksmith_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/locksmith-go/locksmith"
	"github.com/locksmith-go/locksmith/internal/redistest"
)

// A docProgram is a whole program (a Go code block that starts with
// "package main") found in a Markdown file.
type docProgram struct {
	file string // the Markdown file, relative to the module root
	line int    // the line of the opening fence
	src  string
}

// docPrograms returns the whole programs in the Go code blocks of the
// Markdown file at path. Blocks that are snippets are left out. A fence
// may be indented, as inside a list item; the indentation is removed.
func docPrograms(t *testing.T, path string) []docProgram {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		progs  []docProgram
		block  []string
		indent string
		start  int
		inGo   bool
		inCode bool
	)
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case !inCode && strings.HasPrefix(trimmed, "```"):
			inCode = true
			inGo = trimmed == "```go"
			indent = line[:len(line)-len(strings.TrimLeft(line, " \t"))]
			start, block = i+1, nil
		case inCode && trimmed == "```":
			inCode = false
			src := strings.Join(block, "\n") + "\n"
			if inGo && strings.HasPrefix(strings.TrimSpace(src), "package main") {
				progs = append(progs, docProgram{file: path, line: start, src: src})
			}
		case inCode:
			block = append(block, strings.TrimPrefix(line, indent))
		}
	}
	if inCode {
		t.Fatalf("%s:%d: code block never closed", path, start)
	}
	return progs
}

// buildProgram builds src as package main of a directory inside this
// module that exists only in a go build overlay, so that it compiles
// against this module's code and its go.mod, and leaves nothing behind.
// It returns the compiler's output when the build fails.
func buildProgram(t *testing.T, name, src string) error {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to build the programs of the documentation: %v", err)
	}
	root, err := os.Getwd() // the module root: this test is in the root package
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	file := filepath.Join(tmp, "main.go")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	pkgDir := filepath.Join(root, "internal", "readmecheck", name)
	overlay, err := json.Marshal(map[string]map[string]string{
		"Replace": {filepath.Join(pkgDir, "main.go"): file},
	})
	if err != nil {
		t.Fatal(err)
	}
	overlayFile := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(overlayFile, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), goTool, "build", "-overlay", overlayFile, "-o", os.DevNull, "./internal/readmecheck/"+name)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	return nil
}

// TestReadmePrograms builds every whole program in README.md and docs/*.md,
// so that a change to the API cannot leave them behind. The quickstart in
// the README is such a program.
func TestReadmePrograms(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var progs []docProgram
	for _, path := range append([]string{"README.md"}, docs...) {
		found := docPrograms(t, path)
		if path == "README.md" && len(found) == 0 {
			t.Fatal("README.md has no whole program: the quickstart must start with package main, so that this test builds it")
		}
		progs = append(progs, found...)
	}
	for i, p := range progs {
		t.Run(fmt.Sprintf("%s:%d", p.file, p.line), func(t *testing.T) {
			t.Parallel()
			if err := buildProgram(t, fmt.Sprint(i), p.src); err != nil {
				t.Errorf("the program at %s:%d does not build: %v", p.file, p.line, err)
			}
		})
	}
}

// TestReadmeCheckCatchesBrokenProgram makes sure that buildProgram fails
// for a program that does not compile, so that TestReadmePrograms cannot
// pass by building nothing.
func TestReadmeCheckCatchesBrokenProgram(t *testing.T) {
	const broken = "package main\n\nimport \"github.com/locksmith-go/locksmith\"\n\nfunc main() { locksmith.NoSuchFunction() }\n"
	err := buildProgram(t, "broken", broken)
	if err == nil || !strings.Contains(err.Error(), "NoSuchFunction") {
		t.Errorf("building a program that calls an undefined function: %v, want an error naming it", err)
	}
}

// TestReadmeRecipeEveryCallerGetsItsTurn checks the recipe of "A lock per
// resource" in docs/patterns.md, scaled down: callers that each need their
// own turn wait with an unlimited strategy under a deadline that fits the
// work, and all of them get it. 50 callers on two Lockers each hold the
// lock for 20ms, so the last one waits about a second. A LimitRetry
// strategy scaled down the same way (it waits at most 75ms in all) gives up
// for most of them, as LimitRetry(ExponentialBackoff(10ms, 500ms), 10),
// the recipe this one replaced, does for callers that hold the lock 400ms.
func TestReadmeRecipeEveryCallerGetsItsTurn(t *testing.T) {
	srv := redistest.Shared(t)
	const (
		callers = 50
		hold    = 20 * time.Millisecond
	)
	t.Run("unlimited under a deadline", func(t *testing.T) {
		// The deadline fits the work, callers*hold: one second here,
		// with a wide margin for a slow machine or the race detector.
		turns, notObtained := contendOnce(t, srv, callers, hold, 20*callers*hold,
			locksmith.ExponentialBackoff(10*time.Millisecond, 500*time.Millisecond))
		if notObtained > 0 || turns != callers {
			t.Errorf("%d of %d callers had their turn, %d got ErrNotObtained; want every caller to have its turn",
				turns, callers, notObtained)
		}
	})
	t.Run("limited", func(t *testing.T) {
		turns, notObtained := contendOnce(t, srv, callers, hold, 20*callers*hold,
			locksmith.LimitRetry(locksmith.ExponentialBackoff(time.Millisecond, 10*time.Millisecond), 10))
		if notObtained == 0 {
			t.Errorf("%d of %d callers had their turn and none got ErrNotObtained; want LimitRetry to give up for some",
				turns, callers)
		}
	})
}

// contendOnce runs callers goroutines, spread over two Lockers, that each
// take the lock on one key once with WithLock and the strategy, under a
// context with the timeout, and hold it for hold. It returns how many
// had their turn and how many got ErrNotObtained; it fails t on any other
// error, and if two turns overlapped.
func contendOnce(t *testing.T, srv *redistest.Server, callers int, hold, timeout time.Duration,
	strategy locksmith.RetryStrategy) (turns, notObtained int) {
	t.Helper()
	lockers := []*locksmith.Locker{
		locksmith.New(newClient(t, srv.Options(), nil)),
		locksmith.New(newClient(t, srv.Options(), nil)),
	}
	key := uniqueKey(t)
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	var (
		inside, overlaps, held atomic.Int64
		wg                     sync.WaitGroup
		errs                   = make(chan error, callers)
	)
	for i := range callers {
		l := lockers[i%len(lockers)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- l.WithLock(ctx, key, func(ctx context.Context) error {
				if inside.Add(1) != 1 {
					overlaps.Add(1)
				}
				held.Add(1)
				time.Sleep(hold) // the work
				inside.Add(-1)
				return nil
			}, locksmith.WithRetry(strategy))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		switch {
		case errors.Is(err, locksmith.ErrNotObtained):
			notObtained++
		case err != nil:
			t.Errorf("WithLock: %v", err)
		}
	}
	if n := overlaps.Load(); n != 0 {
		t.Errorf("%d turns overlapped another holder's, want 0", n)
	}
	return int(held.Load()), notObtained
}
