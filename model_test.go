package locksmith

import (
	"bufio"
	"crypto/sha1"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// modelHeader is what a model's header says: the scripts it mirrors, with
// the SHA1 of each as the model was last checked against it, and the runs
// model/check.sh makes of it.
type modelHeader struct {
	file    string
	mirrors map[string]string // script path -> sha1
	checks  []string
	bugs    []string // the BUG_ switch of each bug line
}

var (
	mirrorsLine = regexp.MustCompile(`^/\* mirrors: (scripts/[a-z_]+\.lua) ([0-9a-f]{40}) \*/$`)
	checkLine   = regexp.MustCompile(`^/\* check: (safety|ltl [a-z_]+)( -D[A-Za-z_]+(=[A-Za-z0-9_]+)?)* \*/$`)
	bugLine     = regexp.MustCompile(`^/\* bug: ([A-Z_]+) (safety|ltl [a-z_]+)( -D[A-Za-z_]+(=[A-Za-z0-9_]+)?)* \*/$`)
	headerStart = regexp.MustCompile(`^/\* (mirrors|check|bug):`)
)

func readModelHeaders(t *testing.T) []modelHeader {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("model", "*.pml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no models in model/")
	}
	var hs []modelHeader
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		h := modelHeader{file: file, mirrors: map[string]string{}}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			switch {
			case mirrorsLine.MatchString(line):
				m := mirrorsLine.FindStringSubmatch(line)
				h.mirrors[m[1]] = m[2]
			case checkLine.MatchString(line):
				h.checks = append(h.checks, line)
			case bugLine.MatchString(line):
				h.bugs = append(h.bugs, bugLine.FindStringSubmatch(line)[1])
			case headerStart.MatchString(line):
				t.Errorf("%s: header line not understood: %s", file, line)
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	return hs
}

func scriptSHA1s(t *testing.T) map[string]string {
	t.Helper()
	sums := map[string]string{}
	err := fs.WalkDir(scriptFiles, "scripts", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := scriptFiles.ReadFile(path)
		if err != nil {
			return err
		}
		sum := sha1.Sum(b)
		sums[path] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sums
}

// TestModelsMirrorTheScripts fails when a Lua script changes and a model
// that mirrors it was not revisited: each model names the scripts it
// mirrors with the SHA1 they had when it was last checked against them.
// Whoever changes a script looks again at every model that names it (same
// reads, same writes, same order, the same refusals before the first
// write), runs model/check.sh, updates the SHA1 and says so in the commit.
func TestModelsMirrorTheScripts(t *testing.T) {
	sums := scriptSHA1s(t)
	for _, h := range readModelHeaders(t) {
		if len(h.mirrors) == 0 {
			t.Errorf("%s names no script it mirrors", h.file)
		}
		for script, want := range h.mirrors {
			got, ok := sums[script]
			switch {
			case !ok:
				t.Errorf("%s mirrors %s, which is not embedded (renamed or deleted?)", h.file, script)
			case got != want:
				t.Errorf("%s mirrors %s at SHA1 %s; the script is now %s: revisit the model against the script, run model/check.sh, then update the mirrors line", h.file, script, want, got)
			}
		}
	}
}

// TestEveryScriptIsModelledOrExcused: a script that no model mirrors is
// listed, with the reason, under "Scripts not modelled" in model/README.md.
func TestEveryScriptIsModelledOrExcused(t *testing.T) {
	modelled := map[string][]string{}
	for _, h := range readModelHeaders(t) {
		for script := range h.mirrors {
			modelled[script] = append(modelled[script], filepath.Base(h.file))
		}
	}
	readme, err := os.ReadFile(filepath.Join("model", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	excused := map[string]bool{}
	section := false
	item := regexp.MustCompile("^- `(scripts/[a-z_]+\\.lua)`: .+")
	for _, line := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(line, "## ") {
			section = strings.TrimSpace(strings.TrimPrefix(line, "## ")) == "Scripts not modelled"
			continue
		}
		if m := item.FindStringSubmatch(line); section && m != nil {
			excused[m[1]] = true
		}
	}
	var scripts []string
	for s := range scriptSHA1s(t) {
		scripts = append(scripts, s)
	}
	sort.Strings(scripts)
	for _, s := range scripts {
		switch {
		case len(modelled[s]) > 0 && excused[s]:
			t.Errorf("%s is mirrored by %v and also listed as not modelled in model/README.md", s, modelled[s])
		case len(modelled[s]) == 0 && !excused[s]:
			t.Errorf("no model mirrors %s: model it, or list it with the reason under \"Scripts not modelled\" in model/README.md", s)
		}
	}
	for s := range excused {
		if _, ok := modelled[s]; !ok {
			if _, err := scriptFiles.ReadFile(s); err != nil {
				t.Errorf("model/README.md excuses %s, which is not embedded", s)
			}
		}
	}
}

// TestModelSwitchesExist: each model is checked at least once with its
// defaults, and each bug switch its header names is used in its body (a
// switch that changes nothing would make check.sh's "found" meaningless:
// the default run passes, so the same run cannot fail).
func TestModelSwitchesExist(t *testing.T) {
	for _, h := range readModelHeaders(t) {
		if len(h.checks) == 0 {
			t.Errorf("%s has no check line", h.file)
		}
		body, err := os.ReadFile(h.file)
		if err != nil {
			t.Fatal(err)
		}
		for _, bug := range h.bugs {
			uses := regexp.MustCompile(`(?m)^\s*#\s*(ifdef|ifndef|if defined\(|elif defined\()\s*` + bug + `\b`)
			if !uses.Match(body) {
				t.Errorf("%s names the switch %s but never tests it with #ifdef/#ifndef", h.file, bug)
			}
		}
	}
	info, err := os.Stat(filepath.Join("model", "check.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode()&0o111 == 0 {
		t.Error("model/check.sh is not executable")
	}
}
