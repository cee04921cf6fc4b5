"""Planners: something that, given a chat conversation and tool schemas, returns the next tool call."""
