package redisstream_test

const childEnv = "REDISSTREAM_TEST_CHILD"

func runChild() {}
