package rederive

import "github.com/auditd/auditd/rederive/spec"

// LoadJobs reads the derivation spec files and compiles each spec, once
// (checking a file compiles its specs: those derivations are the jobs'):
// every command that runs, checks or guards derivations (serve's daemon,
// its invariants and retention, verify, prune, check-config) starts from
// the jobs it returns, in file order. It also returns the specs' warnings.
// Any error (a file that does not read, a spec that does not compile:
// every one, joined, each a *spec.Error) returns no jobs. No files: no
// jobs.
func LoadJobs(files ...string) ([]Job, []*spec.Warning, error) {
	if len(files) == 0 {
		return nil, nil, nil
	}
	specs, ds, err := spec.LoadCompiled(files...)
	if err != nil {
		return nil, nil, err
	}
	jobs := make([]Job, len(specs))
	for i, s := range specs {
		jobs[i] = Job{Spec: s, Derivation: ds[i]}
	}
	return jobs, spec.Warnings(specs), nil
}

// Specs returns the jobs' specs, in order.
func Specs(jobs []Job) []*spec.Spec {
	out := make([]*spec.Spec, len(jobs))
	for i, j := range jobs {
		out[i] = j.Spec
	}
	return out
}
