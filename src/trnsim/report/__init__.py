"""Plots (PNG, matplotlib's Agg backend) and self-contained HTML reports of cluster results.

``plots`` draws figures from ``trnsim.cluster`` results; ``html`` assembles tables and images into one file
that a browser opens offline (images embedded as base64 data URIs, styles inline, no scripts).
"""
