"""Worker processes only: the worker's main loop, its step loops and the hosted vector env's loop.
Never imports _parent.
"""
