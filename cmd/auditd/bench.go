package main

func runBench(args []string) error { return nil }
