package postgres

// TrimDeleteSQL is the trim's delete, for a test of its plan.
var TrimDeleteSQL = trimDeleteSQL
