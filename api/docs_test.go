package api_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestErrorCodesDocumented: every error code the server writes is in the
// error table of docs/api.md with its status.
func TestErrorCodesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob("*.go")
	write := regexp.MustCompile(`http\.Status(\w+), "([a-z][a-z_]+)"`)
	status := map[string]string{"BadRequest": "400", "Unauthorized": "401", "Forbidden": "403", "NotFound": "404",
		"MethodNotAllowed": "405", "RequestTimeout": "408", "Conflict": "409", "RequestEntityTooLarge": "413",
		"InternalServerError": "500", "ServiceUnavailable": "503"}
	n := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range write.FindAllStringSubmatch(string(src), -1) {
			code, ok := status[m[1]]
			if !ok {
				continue // a status written with a body that is not an error (202, 200)
			}
			n++
			row := "| " + code + " | `" + m[2] + "` |"
			if !strings.Contains(string(doc), row) {
				t.Errorf("%s writes %s %s; docs/api.md's error table has no row %q", f, code, m[2], row)
			}
		}
	}
	if n < 20 {
		t.Fatalf("found only %d error codes in api/*.go", n)
	}
}
