package server

import (
	"testing"
)

// FuzzAddCheckpoint: no body makes the witness panic, and one it refuses
// leaves its state as it was.
func FuzzAddCheckpoint(f *testing.F) {
	fx := newFixture(f)
	cp := fx.log.Checkpoint()
	f.Add(req(0, nil, cp.Note))
	f.Add(req(5, nil, cp.Note))
	f.Add([]byte("old 5\n\n" + fx.log.Origin() + "\n5\nAAAA\n\n— x y\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		size, root, err := fx.srv.State(fx.log.Origin())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fx.srv.AddCheckpoint(body); err != nil {
			s2, r2, _ := fx.srv.State(fx.log.Origin())
			if s2 != size || r2 != root {
				t.Fatalf("refused body %q changed the state: %d %s -> %d %s", body, size, root, s2, r2)
			}
		}
	})
}
