"""The simulated editor: `recipes` turns a modification spec into source edits through the recipes shipped
beside a harness, with the edit operations of `ops`. It never imports harness code.
"""
