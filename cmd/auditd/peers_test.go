package main

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/mod/sumdb/note"
)

// TestPeersConfig: keys inline or from a file; refused: no key, a key that
// does not parse, key and key_file both, a negative interval, a peer
// listed twice (one URL). Allowed: peers with one key, and peers with this
// instance's key (a split brain, or one peer list for every instance: the
// check tells itself apart by its identity).
func TestPeersConfig(t *testing.T) {
	gen := func(name string) (note.Verifier, string) {
		_, vkey, err := note.GenerateKey(rand.Reader, name)
		if err != nil {
			t.Fatal(err)
		}
		v, err := note.NewVerifier(vkey)
		if err != nil {
			t.Fatal(err)
		}
		return v, vkey
	}
	self, selfKey := gen("self.example")
	_, bKey := gen("b.example")
	_, cKey := gen("c.example")
	file := filepath.Join(t.TempDir(), "c.pub")
	if err := os.WriteFile(file, []byte(cKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  PeersConfig
		ok   bool
	}{
		{"two peers", PeersConfig{List: []PeerConfig{{URL: "http://b:1", Key: bKey}, {URL: "http://c:1", KeyFile: file}}}, true},
		{"no key", PeersConfig{List: []PeerConfig{{URL: "http://b:1"}}}, false},
		{"bad key", PeersConfig{List: []PeerConfig{{URL: "http://b:1", Key: "b.example+nothex+AAAA"}}}, false},
		{"key and key_file", PeersConfig{List: []PeerConfig{{URL: "http://b:1", Key: bKey, KeyFile: file}}}, false},
		{"missing key_file", PeersConfig{List: []PeerConfig{{URL: "http://b:1", KeyFile: file + ".none"}}}, false},
		{"negative interval", PeersConfig{Interval: -1}, false},
		{"listed twice", PeersConfig{List: []PeerConfig{{URL: "http://b:1", Key: bKey}, {URL: "http://b:1", Key: cKey}}}, false},
		{"same key twice", PeersConfig{List: []PeerConfig{{URL: "http://b:1", Key: bKey}, {URL: "http://b2:1", Key: bKey}}}, true},
		{"this instance's key", PeersConfig{List: []PeerConfig{{URL: "http://b:1", Key: selfKey}}}, true},
		{"this instance's key, explicit prefix", PeersConfig{List: []PeerConfig{{URL: "http://b:1", Key: selfKey, OriginPrefix: "self.example/"}}}, true},
		{"this instance's key twice", PeersConfig{List: []PeerConfig{{URL: "http://a:1", Key: selfKey}, {URL: "http://b:1", Key: selfKey}}}, true},
	} {
		ps, err := tc.cfg.peers(self)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok %v", tc.name, err, tc.ok)
		}
		if tc.ok && len(ps) != len(tc.cfg.List) {
			t.Errorf("%s: %d peers", tc.name, len(ps))
		}
	}
}
