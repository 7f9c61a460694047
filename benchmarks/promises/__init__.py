"""Do plans keep their promises? (README.md in this folder.)"""
