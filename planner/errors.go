package planner

import "errors"

// Errors of the planner core. Functions wrap them with detail (fmt.Errorf("...: %w",
// Err...)), so callers test with errors.Is.
var (
	// ErrInvalidConfig: a Config field, a predictor option or a run-time target is out of
	// range; the message names the field.
	ErrInvalidConfig = errors.New("planner: invalid configuration")
	// ErrUnknownPredictor: no load predictor is registered under the requested name.
	ErrUnknownPredictor = errors.New("planner: unknown load predictor")
	// ErrDuplicatePredictor: a load predictor name was registered twice.
	ErrDuplicatePredictor = errors.New("planner: load predictor already registered")
)
