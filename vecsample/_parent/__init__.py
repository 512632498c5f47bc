"""The trainer's process: worker processes, commands, the step channel, restart, replay, start-up
checks, signals and timers.
"""
