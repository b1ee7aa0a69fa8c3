package ledger

import (
	"context"
	"testing"
)

// BenchmarkAppendSignEach measures small appends from one producer with a
// zero checkpoint interval: a checkpoint is signed after every group
// commit, the worst case for the cost of signing.
func BenchmarkAppendSignEach(b *testing.B) {
	st := benchStore(b, WithCheckpointInterval(0))
	l, err := st.CreateLog("sign")
	if err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"a":1}`)
	for i := 0; b.Loop(); i++ {
		res, err := l.Append(context.Background(), []Entry{{ID: uuidLike(uint64(i)), Payload: payload, PayloadJSON: true}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := l.WaitCheckpoint(context.Background(), res.Size); err != nil {
			b.Fatal(err)
		}
	}
}
