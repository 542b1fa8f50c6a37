package postgres

// TrimDeleteSQL is the trim's delete, for a test of its plan.
var TrimDeleteSQL = trimDeleteSQL

// LockTopic and TopicLock name a topic's advisory lock, for a test that
// holds it as a new group does.
const LockTopic = lockTopic

var TopicLock = topicLock
