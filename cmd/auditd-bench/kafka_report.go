package main

import (
	"context"
	"fmt"
	"os"
	"slices"
)

// rssMedian is the median resident set of the samples.
func rssMedian(s []rssSample) int64 {
	if len(s) == 0 {
		return 0
	}
	v := make([]int64, len(s))
	for i, x := range s {
		v[i] = x.rss
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// daemonProfile takes a CPU profile of the daemon over its first
// -profile-seconds of consuming into -cpuprofile, if set, from the debug
// listener whose URL debug yields. The channel it returns is sent the
// outcome once done.
func daemonProfile(ctx context.Context, debug <-chan string, f kafkaFlags) <-chan error {
	done := make(chan error, 1)
	if f.cpuProfile == "" {
		done <- nil
		return done
	}
	go func() {
		url := <-debug
		b, err := httpGet(ctx, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", url, f.profileSeconds))
		if err == nil {
			err = os.WriteFile(f.cpuProfile, b, 0o644)
		}
		done <- err
	}()
	return done
}
