package spec

import (
	"github.com/auditd/auditd/rederive/celfold"
	"github.com/auditd/auditd/rederive/fold"
)

// Compile checks a spec and compiles its CEL expressions into a
// Derivation. Errors are *Error, joined.
func Compile(s *Spec) (fold.Derivation, error) {
	errs := s.check()
	d, cerrs := compileCEL(s)
	errs = append(errs, cerrs...)
	if len(errs) > 0 {
		sortSpecErrors(errs)
		return nil, joinErrors(errs)
	}
	return d, nil
}

// celCompile is celfold.Compile; a test counts its calls.
var celCompile = celfold.Compile

// compileCEL compiles a spec's expressions. Errors are placed in the
// spec's file where its positions are known. Absent expressions are left
// to Spec.check.
func compileCEL(s *Spec) (fold.Derivation, []*Error) {
	d, xerrs := celCompile(celfold.Expressions{Name: s.Name, Sources: s.Sources, Raw: s.Decode == "raw",
		Filter: s.Filter, Key: s.Key, Initial: s.Initial, Step: s.Step,
		AllKeys: s.AllKeys, StepAll: s.StepAll, Value: s.Value, CostLimit: uint64(max(s.CostLimit, 0))})
	var errs []*Error
	for _, e := range xerrs {
		se := s.errAt(e.Field, "%s", e.Msg)
		if e.Line > 0 {
			if fl, fc, ok := s.exprPosition(e.Field, e.Line, e.Column); ok {
				se.Line, se.Column = fl, fc
			}
		}
		errs = append(errs, se)
	}
	if d == nil {
		return nil, errs
	}
	return d, errs
}
