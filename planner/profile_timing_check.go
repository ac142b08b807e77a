package planner

import "github.com/turbine-llm/turbine/engines/mocker"

var _ mocker.Timing = ProfileTiming{}
