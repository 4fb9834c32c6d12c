"""Sum the sales of each month and write the totals to ../out/summary.csv.

Run from this folder, under the example policy:
    airlock run --policy ../data-analysis.yaml -- python3 analyze.py
"""
import csv
from collections import defaultdict

totals = defaultdict(int)
with open("sales.csv", newline="") as f:
    for row in csv.DictReader(f):
        totals[row["month"]] += int(row["amount"])

with open("../out/summary.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["month", "total"])
    for month in sorted(totals):
        w.writerow([month, totals[month]])
        print(month, totals[month])
