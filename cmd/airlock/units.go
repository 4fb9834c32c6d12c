package main

import "time"

func durationOf(ns int64) time.Duration { return time.Duration(ns) }
