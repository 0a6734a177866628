package deploy_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// module is the module path the layout rules are written against.
const module = "github.com/gpugov/gpugov/"

// TestPackageLayout holds docs/design.md §2's dependency rules on every Go
// file, tests included: nothing under internal/ imports the Temporal,
// PostgreSQL or HTTP sides or the composition roots (store, api, workflows,
// activities, service, replay, cmd), internal/vocab imports nothing of
// gpugov, and workflows' code (not its tests) does not import store.
func TestPackageLayout(t *testing.T) {
	outer := []string{"store", "api", "workflows", "activities", "service", "replay", "cmd"}
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == ".git" || name == "bin" || name == "node_modules" || name == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel := filepath.ToSlash(strings.TrimPrefix(path, "../"))
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		checked++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if !strings.HasPrefix(p, module) {
				continue
			}
			target := strings.TrimPrefix(p, module)
			top := strings.SplitN(target, "/", 2)[0]
			switch {
			case strings.HasPrefix(rel, "internal/vocab/"):
				t.Errorf("%s imports %s: internal/vocab imports nothing of gpugov", rel, target)
			case strings.HasPrefix(rel, "internal/"):
				for _, o := range outer {
					if top == o {
						t.Errorf("%s imports %s: nothing under internal/ imports %s", rel, target, o)
					}
				}
			case strings.HasPrefix(rel, "workflows/") && !strings.HasSuffix(rel, "_test.go") && target == "store":
				t.Errorf("%s imports store: workflows reach the store only through activities (their tests may set one up)", rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d Go files; the walk did not reach the repository", checked)
	}
}
