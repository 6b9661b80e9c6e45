package main

import "errors"

func runDev(args []string) error { return errors.New("dev: not yet") }
