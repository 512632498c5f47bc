"""vecsample under another library's API: gymnasium's VectorEnv and its vector infos.
"""
